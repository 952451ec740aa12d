//go:build !linux

package cluster

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill()
	}
	return p.Signal(sig)
}

func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

func rssBytes(pid int) int64 { return 0 }

// A node runs on Linux only (checkNodePrereqs says so); these keep the
// package building elsewhere.
type hostState struct {
	Owner       int
	Dir         string
	NodeCgroups []string
}

func captureHost(dir string, _ []string) *hostState { return &hostState{Dir: dir} }
func saveHostState(*os.File, *hostState) error      { return nil }
func loadHostState(*os.File) (*hostState, error)    { return nil, nil }
func cleanupHost(*hostState) error                  { return nil }
func tryFlock(*os.File) (bool, error)               { return false, syscall.ENOSYS }
func unmountUnder(string) error                     { return nil }

// MountsUnder lists the mount points at or below dir (Linux only).
func MountsUnder(string) []string { return nil }

func killCgroupProcs([]string, time.Duration) error { return nil }

func foreignKubelet() error { return nil }

func reserveHugepages(*os.File, *hostState, int) error {
	return errors.New("cluster: nodes run on Linux only")
}

func killMentioning(string, time.Duration) error { return nil }
func nodeCgroupDirs(string) []string             { return nil }
func setupBridge() error                         { return errors.New("cluster: nodes run on Linux only") }

func (n *Node) startNamespaces(context.Context) error {
	return errors.New("cluster: nodes run on Linux only")
}

// Leftovers lists what a stopped cluster left behind (Linux only).
func Leftovers(string, string) []string { return nil }
