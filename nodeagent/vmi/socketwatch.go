package vmi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// socketWatch wakes a VMI's reconcile the moment its launcher's socket
// appears (kemu-launcher renames launcher-init.sock to launcher.sock once
// it serves): an inotify watch on the Pod's sockets directory, instead of
// finding it at the next poll (Config.SocketPoll, 1 s, which stays as the
// fallback). A watch ends when its socket appeared, when its directory is
// removed (the Pod's), or with Forget. An event only makes the reconcile
// run: connecting still verifies what is there (launcherclient.Target).
type socketWatch struct {
	f      *os.File
	notify func(key string)

	mu    sync.Mutex
	byWD  map[int32]socketWait
	byDir map[string]int32
}

// socketWait is what one watch waits for.
type socketWait struct {
	dir, name, key string
}

// socketWatchMask: a file created in, or moved into, the directory; the
// directory itself is not followed if it is a symlink, and must be one.
const socketWatchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR

func newSocketWatch(notify func(key string)) (*socketWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("vmi: inotify: %w", err)
	}
	return &socketWatch{f: os.NewFile(uintptr(fd), "inotify"), notify: notify,
		byWD: map[int32]socketWait{}, byDir: map[string]int32{}}, nil
}

// Watch calls notify(key) once socket (a path) appears. An error means no
// watch (the directory does not exist yet, say): the caller polls.
func (w *socketWatch) Watch(socket, key string) error {
	dir, name := filepath.Dir(socket), filepath.Base(socket)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.byDir[dir]; ok {
		return nil
	}
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), dir, socketWatchMask)
	if err != nil {
		return fmt.Errorf("vmi: watching %s: %w", dir, err)
	}
	w.byWD[int32(wd)], w.byDir[dir] = socketWait{dir: dir, name: name, key: key}, int32(wd)
	return nil
}

// Forget ends the watch of socket's directory, if any.
func (w *socketWatch) Forget(socket string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	dir := filepath.Dir(socket)
	if wd, ok := w.byDir[dir]; ok {
		_, _ = unix.InotifyRmWatch(int(w.f.Fd()), uint32(wd))
		delete(w.byDir, dir)
		delete(w.byWD, wd)
	}
}

// Len is the number of watches.
func (w *socketWatch) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byWD)
}

// Run reads events until Close.
func (w *socketWatch) Run() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				klog.ErrorS(err, "Reading the launcher sockets' inotify events; the node agent polls for sockets")
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameEnd := off + unix.SizeofInotifyEvent + int(ev.Len)
			if nameEnd > n {
				break
			}
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:nameEnd], "\x00"))
			w.event(ev.Wd, ev.Mask, name)
			off = nameEnd
		}
	}
}

func (w *socketWatch) event(wd int32, mask uint32, name string) {
	w.mu.Lock()
	s, ok := w.byWD[wd]
	switch {
	case !ok:
	case mask&unix.IN_IGNORED != 0: // the directory went, and the watch with it
		delete(w.byWD, wd)
		delete(w.byDir, s.dir)
		ok = false
	case name == s.name:
		_, _ = unix.InotifyRmWatch(int(w.f.Fd()), uint32(wd))
		delete(w.byWD, wd)
		delete(w.byDir, s.dir)
	default:
		ok = false // another file (launcher-init.sock)
	}
	w.mu.Unlock()
	if ok {
		w.notify(s.key)
	}
}

// Close ends Run and every watch.
func (w *socketWatch) Close() error { return w.f.Close() }
