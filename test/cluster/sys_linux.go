package cluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr puts the child in its own process group (so Stop can kill
// everything it forks) and has the kernel SIGKILL it when the thread that
// started it dies. startProcess keeps that thread alive (LockOSThread) for as
// long as the child runs, so the signal fires only when the test process
// itself goes away.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
}

// signalGroup sends sig to the child's process group.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	err := syscall.Kill(-p.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// processAlive reports whether pid names a live (not zombie) process.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// state is the field after the ")" that closes comm.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			if i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
				return false
			}
			break
		}
	}
	return true
}

// rssBytes returns the resident set size of pid (0 if unknown).
func rssBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return 0
	}
	return resident * int64(os.Getpagesize())
}
