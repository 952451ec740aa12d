package cgroup

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// program compiles an allowlist to a BPF_PROG_TYPE_CGROUP_DEVICE program:
// return 1 (allow) when a rule matches, 0 (EPERM) otherwise.
//
// Unlike containerd/cgroups' DeviceFilter (runc's old filter), a rule granting
// "r" does not allow an open for read-write: every requested access bit must be
// granted by the matching rule.
func program(a Allowlist) (asm.Instructions, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	// struct bpf_cgroup_dev_ctx { u32 access_type; /* type | access<<16 */ u32 major; u32 minor; }
	insts := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.Mov.Reg32(asm.R3, asm.R2),
		asm.And.Imm32(asm.R2, 0xffff), // R2 = type
		asm.RSh.Imm32(asm.R3, 16),     // R3 = requested access
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
	for i, r := range a {
		next := fmt.Sprintf("rule-%d", i+1)
		start := len(insts)
		switch r.Type {
		case Char:
			insts = append(insts, asm.JNE.Imm32(asm.R2, unix.BPF_DEVCG_DEV_CHAR, next))
		case Block:
			insts = append(insts, asm.JNE.Imm32(asm.R2, unix.BPF_DEVCG_DEV_BLOCK, next))
		}
		var granted int32
		for _, c := range r.Access {
			switch c {
			case 'r':
				granted |= unix.BPF_DEVCG_ACC_READ
			case 'w':
				granted |= unix.BPF_DEVCG_ACC_WRITE
			case 'm':
				granted |= unix.BPF_DEVCG_ACC_MKNOD
			}
		}
		const rwm = unix.BPF_DEVCG_ACC_READ | unix.BPF_DEVCG_ACC_WRITE | unix.BPF_DEVCG_ACC_MKNOD
		if granted != rwm {
			// if (access & ~granted) goto next
			insts = append(insts,
				asm.Mov.Reg32(asm.R1, asm.R3),
				asm.And.Imm32(asm.R1, rwm&^granted),
				asm.JNE.Imm32(asm.R1, 0, next))
		}
		if r.Major != Any {
			insts = append(insts, asm.JNE.Imm32(asm.R4, int32(r.Major), next))
		}
		if r.Minor != Any {
			insts = append(insts, asm.JNE.Imm32(asm.R5, int32(r.Minor), next))
		}
		insts = append(insts, asm.Mov.Imm32(asm.R0, 1), asm.Return())
		if i > 0 {
			insts[start] = insts[start].WithSymbol(fmt.Sprintf("rule-%d", i))
		}
	}
	deny := asm.Mov.Imm32(asm.R0, 0)
	if len(a) > 0 {
		deny = deny.WithSymbol(fmt.Sprintf("rule-%d", len(a)))
	}
	return append(insts, deny, asm.Return()), nil
}
