/*
 * The KVM probe guest: a 512-byte boot sector that goes through the modes a
 * Linux guest's boot goes through, so that a host on which a Linux guest
 * hangs under KVM (a nested "kvm-pvm" host hangs at "Probing EDD") fails
 * this probe too:
 *   real mode: the BIOS's disk services, as Linux's EDD probe calls them
 *              (int 13h AH=41h and AH=48h), then "kemu-probe: real mode";
 *   32-bit protected mode with a flat GDT;
 *   64-bit long mode with PAE paging (an identity-mapped 2 MiB page):
 *              "KEMU-GUEST ready", then halt.
 * Output goes to COM1 (port 0x3f8); the probe reads it from -serial stdio.
 * Built by build.sh into boot.bin, which devices/kvm embeds;
 * hack/verify-codegen.sh checks that boot.bin is built from this file.
 */
	.set COM1, 0x3f8
	.set PML4, 0x1000		/* page tables at 0x1000-0x4fff */
	.set idt, 0x5000		/* 15 gates; only #PF is set */
	.set params, 0x6000		/* EDD drive parameters (30 bytes) */

	.macro PUTS
	/* print the NUL-terminated string at (e)si on COM1 */
1:	lodsb
	test %al, %al
	jz 3f
	mov %al, %bl
	mov $COM1+5, %dx		/* line status: wait for THR empty */
2:	in %dx, %al
	test $0x20, %al
	jz 2b
	mov $COM1, %dx
	mov %bl, %al
	out %al, %dx
	jmp 1b
3:
	.endm

	.code16
	.globl _start
_start:
	cli
	xor %ax, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	mov $0x7c00, %sp
	ljmp $0, $real
real:
	mov %dl, drive			/* the BIOS passes the boot drive in dl */

	/* EDD: are the extensions there (41h), then the drive's parameters (48h) */
	mov $0x41, %ah
	mov $0x55aa, %bx
	int $0x13
	jc noedd
	cmp $0xaa55, %bx
	jne noedd
	mov $0x48, %ah
	mov drive, %dl
	mov $params, %si
	movw $0x1e, (%si)
	int $0x13
noedd:
	/* timer interrupts: the BIOS's IRQ 0 handler counts ticks (18.2 Hz) at 0x46c */
	sti
	mov 0x46c, %cx
	add $2, %cx
7:	hlt
	cmp 0x46c, %cx
	jns 7b
	cli
	mov $msgreal, %si
	PUTS

	lgdt gdtr
	mov %cr0, %eax
	or $1, %eax
	mov %eax, %cr0
	ljmp $0x08, $prot

	.code32
prot:
	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	mov $0x7c00, %esp
	/* PML4[0] -> PDPT, PDPT[0] -> PD, PD[0] = 2 MiB page at 0 */
	mov $PML4, %edi
	xor %eax, %eax
	mov $0x1400, %ecx		/* and 0x4000 (a second PD), 0x5000 (the IDT) */
	rep stosl
	movl $PML4+0x1003, PML4
	movl $PML4+0x2003, PML4+0x1000
	/* PD: the first GiB in 2 MiB pages */
	mov $PML4+0x2000, %edi
	mov $0x83, %eax
	mov $512, %ecx
4:	mov %eax, (%edi)
	add $0x200000, %eax
	add $8, %edi
	loop 4b
	mov $PML4, %eax
	mov %eax, %cr3
	mov %cr4, %eax
	or $0x20, %eax			/* PAE */
	mov %eax, %cr4
	mov $0xc0000080, %ecx		/* EFER.LME */
	rdmsr
	or $0x100, %eax
	wrmsr
	mov %cr0, %eax
	or $0x80000000, %eax		/* paging */
	mov %eax, %cr0
	ljmp $0x18, $long

	.code64
long:
	/* a page fault, handled: the second GiB is unmapped until the #PF
	 * handler maps it (as Linux's decompressor maps memory on demand) */
	mov $idt, %edi
	lea pf(%rip), %rax
	mov %ax, 14*16(%rdi)		/* vector 14: offset 15:0 */
	movw $0x18, 14*16+2(%rdi)	/* selector */
	movw $0x8e00, 14*16+4(%rdi)	/* present interrupt gate */
	shr $16, %rax
	mov %ax, 14*16+6(%rdi)		/* offset 31:16 (upper half is 0) */
	lidt idtr(%rip)
	mov $0x40000000+0x1234, %rdi
	movq $0x4b454d55, (%rdi)
	cmpq $0x4b454d55, (%rdi)
	jne halt
	lea msgready(%rip), %rsi
	PUTS
	jmp halt
pf:
	/* PDPT[1] -> a PD (0x4000) mapping 1-2 GiB in 2 MiB pages; the
	 * guest has 128 MiB, so 1 GiB aliases nothing: map it to 8 MiB */
	push %rax
	push %rdi
	movq $0x800083, 0x4000
	movq $0x4003, PML4+0x1008
	mov %cr3, %rax
	mov %rax, %cr3
	pop %rdi
	pop %rax
	add $8, %rsp			/* the error code */
	iretq
halt:
	cli
	hlt
	jmp halt

	.p2align 3
gdt:
	.quad 0
	.quad 0x00cf9a000000ffff		/* 0x08: 32-bit code */
	.quad 0x00cf92000000ffff		/* 0x10: data */
	.quad 0x00af9a000000ffff		/* 0x18: 64-bit code */
gdtr:
	.word gdtr - gdt - 1
	.long gdt
idtr:
	.word 16*15 - 1
	.quad idt
drive:
	.byte 0
msgreal:
	.asciz "kemu-probe: real mode\n"
msgready:
	.asciz "KEMU-GUEST ready\n"
	.org 510
	.word 0xaa55
