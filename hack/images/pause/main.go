// Command pause is the sandbox ("pause") process of kemu's test node: it
// sleeps until SIGTERM, SIGINT or SIGHUP and exits 0. As PID 1 of a pod it also
// reaps orphans. It is built statically (CGO_ENABLED=0) by hack/images and
// packed as kemu.local/test/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
