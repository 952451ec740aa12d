package migrationproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// SocketName is the file name of a channel's unix socket in the source
// Pod's socket directory.
func SocketName(channel string) string { return "migration-" + channel + ".sock" }

// socketMode is the mode of the source's unix sockets.
const socketMode = 0o600

// Source is the source side of a migration: one unix listener per
// channel, each accepted connection spliced to a new TLS connection to the
// target's proxy.
type Source struct {
	uid    string
	target Target
	store  *Store
	paths  map[string]string
	lns    map[string]*net.UnixListener // channel → listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  tracker
}

// ListenSource creates dir/SocketName(channel) (mode 0600) for each
// channel and splices every connection accepted there to target. It runs
// until ctx ends or Close is called.
func ListenSource(ctx context.Context, dir, uid string, channels []string, target Target, store *Store) (*Source, error) {
	if err := ValidateUID(uid); err != nil {
		return nil, fmt.Errorf("migration source: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &Source{uid: uid, target: target, store: store, paths: map[string]string{}, lns: map[string]*net.UnixListener{}, ctx: sctx, cancel: cancel}
	for _, ch := range channels {
		if !ValidChannel(ch) {
			s.Close()
			return nil, fmt.Errorf("migration source %s: unknown channel %q", uid, ch)
		}
		if _, dup := s.paths[ch]; dup {
			s.Close()
			return nil, fmt.Errorf("migration source %s: channel %q twice", uid, ch)
		}
		path := filepath.Join(dir, SocketName(ch))
		ln, err := listenUnix(path)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("migration source %s: %w", uid, err)
		}
		s.paths[ch] = path
		s.lns[ch] = ln
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-sctx.Done()
		for _, ln := range s.lns {
			ln.Close()
		}
		s.conns.closeAll()
	}()
	for ch, ln := range s.lns {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.acceptLoop(ch, ln)
		}()
	}
	klog.InfoS("Migration source listening", "migrationUID", uid, "target", target.Addr, "targetNode", target.Node, "channels", channels)
	return s, nil
}

// Paths maps each channel to its socket's path.
func (s *Source) Paths() map[string]string {
	m := make(map[string]string, len(s.paths))
	for k, v := range s.paths {
		m[k] = v
	}
	return m
}

// Close removes the sockets, ends every splice and waits for every
// goroutine of the source.
func (s *Source) Close() error {
	s.cancel()
	for _, ln := range s.lns {
		ln.Close()
	}
	s.wg.Wait()
	var errs []error
	for _, p := range s.paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Source) acceptLoop(channel string, ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if s.ctx.Err() == nil {
				klog.ErrorS(err, "Migration source accept failed", "migrationUID", s.uid, "channel", channel)
				s.cancel()
			}
			return
		}
		sess := s.conns.start(s.uid, c)
		if sess == nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.conns.finish(sess)
			s.forward(sess, channel, c)
		}()
	}
}

func (s *Source) forward(sess *session, channel string, c *net.UnixConn) {
	tc, err := Dial(s.ctx, s.store, s.target, s.uid, channel)
	if err != nil {
		klog.ErrorS(err, "Migration source could not open its channel", "migrationUID", s.uid, "channel", channel)
		return
	}
	if !sess.attach(tc) {
		return
	}
	out, in, err := splice(c, tc)
	klog.V(2).InfoS("Migration source splice ended", "migrationUID", s.uid, "channel", channel, "bytesOut", out, "bytesIn", in, "err", err)
}

// listenUnix listens on path with mode socketMode: the socket is bound
// under a temporary name, chmod'ed, and renamed into place, so that it
// is never reachable with the umask's mode.
func listenUnix(path string) (*net.UnixListener, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+hex.EncodeToString(rnd[:]))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := chmodSocket(tmp, socketMode); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	return ln, nil
}

// chmodSocket sets the mode of the socket at path without following a
// symlink: the directory may be writable by others (a Pod's volume), who
// could put one in the socket's place between bind and chmod.
func chmodSocket(path string, mode uint32) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s is no longer the socket bound there", path)
	}
	// chmod through the O_PATH descriptor's magic link reaches exactly
	// that inode (fchmod refuses O_PATH descriptors).
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode); err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}
