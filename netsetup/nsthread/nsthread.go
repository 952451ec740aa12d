// Package nsthread runs code in another network namespace without leaking
// the namespace to other goroutines or killing children started elsewhere.
package nsthread

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"
)

// Do runs fn on an OS thread switched into ns. Network namespaces are
// per thread, so fn runs on a goroutine locked to its thread, which is
// switched back and unlocked afterwards. Only if switching back fails is
// the thread left locked, so that the Go runtime discards it rather than
// reuse it in the wrong namespace. (Threads must not be discarded
// otherwise: a child started with Pdeathsig from that thread, such as
// QEMU, would be killed with it.) Sockets and files fn opens stay in ns and
// may be used from any goroutine afterwards.
func Do(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if orig.Equal(ns) {
			runtime.UnlockOSThread()
			errc <- fn()
			return
		}
		if err := netns.Set(ns); err != nil {
			// setns failed: the thread is still where it was.
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace: %w", err)
			return
		}
		err = fn()
		if rerr := netns.Set(orig); rerr != nil {
			klog.ErrorS(rerr, "Leaving a network namespace; discarding the thread")
			errc <- err
			return // still locked: the runtime ends this thread
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}
