/*
 * /init of the initramfs the KVM probe gives the host's own kernel: it says
 * the guest is ready on the console and powers the guest off. A static
 * x86-64 Linux program without libc (built by build.sh into init.bin):
 *   mkdir("/dev"); mknod("/dev/console", char 5:1) (both may exist already);
 *   write(open("/dev/console"), "KEMU-GUEST ready\n"); reboot(POWER_OFF).
 */
	.globl _start
_start:
	mov $83, %eax			/* mkdir */
	lea dev(%rip), %rdi
	mov $0755, %esi
	syscall
	mov $133, %eax			/* mknod */
	lea console(%rip), %rdi
	mov $0020600, %esi		/* S_IFCHR | 0600 */
	mov $0x501, %edx		/* makedev(5, 1) */
	syscall
	mov $2, %eax			/* open */
	lea console(%rip), %rdi
	mov $0401, %esi			/* O_WRONLY | O_NOCTTY */
	syscall
	mov %eax, %edi
	mov $1, %eax			/* write */
	lea ready(%rip), %rsi
	mov $readylen, %edx
	syscall
	mov $169, %eax			/* reboot */
	mov $0xfee1dead, %edi
	mov $0x28121969, %esi
	mov $0x4321fedc, %edx		/* LINUX_REBOOT_CMD_POWER_OFF */
	syscall
1:	pause
	jmp 1b
dev:
	.asciz "/dev"
console:
	.asciz "/dev/console"
ready:
	.ascii "KEMU-GUEST ready\n"
	.set readylen, . - ready
