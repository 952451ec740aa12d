// Package kvm decides whether KVM really runs guests on this host.
//
// /dev/kvm existing is not enough: on a nested "kvm-pvm" host the device
// opens and QEMU accepts accel=kvm, yet a Linux guest hangs forever. So the
// probe boots a guest under KVM and waits for it to say it is ready (see
// chooseGuest for which guest); the verdict is cached with the host, its
// kernel, the QEMU version and the probe guest it was made with.
package kvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// DefaultTimeout bounds the probe boot. A guest under working KVM is ready
// in 1–2 s; under TCG the same guest takes 4–8 s, so 15 s is generous.
const DefaultTimeout = 15 * time.Second

// readyMarker is what the probe guest prints when it has booted.
const readyMarker = "KEMU-GUEST ready"

// Options configure a probe.
type Options struct {
	// QEMU is the emulator binary (default qemu-system-x86_64).
	QEMU string
	// Kernel and Initrd are the probe guest (kemu's test guest: its init
	// prints "KEMU-GUEST ready"); "" = the host's kernel with a generated
	// initramfs, else the built-in guest (chooseGuest).
	Kernel, Initrd string
	// Device is the KVM device (default /dev/kvm).
	Device string
	// Timeout bounds the boot (default DefaultTimeout).
	Timeout time.Duration
	// CacheFile keeps the verdict; "" = no cache.
	CacheFile string

	// accel and cpu replace kvm and host: tests boot the probe guests under
	// TCG to prove they run.
	accel, cpu string
}

// Verdict is the probe's answer.
type Verdict struct {
	Usable    bool      `json:"usable"`
	Reason    string    `json:"reason"`
	Key       string    `json:"key"` // host kernel, QEMU and probe guest the verdict holds for
	CheckedAt time.Time `json:"checkedAt"`
	Took      string    `json:"took"`
	Cached    bool      `json:"-"`
}

// Probe returns whether KVM works, from the cache when its key matches.
func Probe(ctx context.Context, o Options) Verdict {
	o = withDefaults(o)
	if reason := openDevice(o.Device); reason != "" {
		return Verdict{Reason: reason, CheckedAt: time.Now()}
	}
	dir, err := os.MkdirTemp("", "kemu-kvm-probe-")
	if err != nil {
		return Verdict{Reason: fmt.Sprintf("probe guest: %v", err), CheckedAt: time.Now()}
	}
	defer os.RemoveAll(dir)
	g, err := chooseGuest(o, dir)
	if err != nil {
		return Verdict{Reason: err.Error(), CheckedAt: time.Now()}
	}
	key, err := cacheKey(ctx, o, g)
	if err != nil {
		return Verdict{Reason: err.Error(), CheckedAt: time.Now()}
	}
	if v, ok := readCache(o.CacheFile, key); ok {
		return v
	}
	start := time.Now()
	v := boot(ctx, o, g)
	v.Key, v.CheckedAt, v.Took = key, start, time.Since(start).Round(time.Millisecond).String()
	klog.InfoS("KVM probe", "usable", v.Usable, "reason", v.Reason, "took", v.Took)
	if ctx.Err() == nil {
		writeCache(o.CacheFile, v)
	}
	return v
}

func withDefaults(o Options) Options {
	if o.QEMU == "" {
		o.QEMU = "qemu-system-x86_64"
	}
	if o.Device == "" {
		o.Device = "/dev/kvm"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// openDevice checks that the KVM device opens and speaks API version 12.
func openDevice(dev string) string {
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("%s: %v", dev, err)
	}
	defer unix.Close(fd)
	const kvmGetAPIVersion = 0xAE00
	v, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmGetAPIVersion, 0)
	if errno != 0 {
		return fmt.Sprintf("%s: KVM_GET_API_VERSION: %v", dev, errno)
	}
	if v != 12 {
		return fmt.Sprintf("%s: KVM API version %d, want 12", dev, v)
	}
	return ""
}

// boot starts the probe guest under KVM and waits for its ready marker.
func boot(ctx context.Context, o Options, g guest) Verdict {
	accel, cpu := "kvm", "host"
	if o.accel != "" {
		accel, cpu = o.accel, o.cpu
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	args := append([]string{"-machine", "q35,accel=" + accel, "-cpu", cpu, "-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio"}, g.args...)
	cmd := exec.Command(o.QEMU, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Verdict{Reason: err.Error()}
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return Verdict{Reason: fmt.Sprintf("starting %s: %v", o.QEMU, err)}
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	ready := make(chan bool, 1)
	console := &lockedBuffer{}
	go func() {
		s := bufio.NewScanner(out)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			if strings.Contains(s.Text(), readyMarker) {
				ready <- true
				_, _ = io.Copy(io.Discard, out)
				return
			}
			console.set(s.Text())
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if ok {
			return Verdict{Usable: true, Reason: g.desc + " booted under " + strings.ToUpper(accel)}
		}
		return Verdict{Reason: fmt.Sprintf("QEMU under %s exited before %s was ready: %s",
			strings.ToUpper(accel), g.desc, lastLine(stderr.String()))}
	case <-ctx.Done():
		last := ""
		if l := console.String(); l != "" {
			last = fmt.Sprintf("; its last console line: %q", l)
		}
		return Verdict{Reason: fmt.Sprintf("%s under %s was not ready within %s (KVM present but not working, e.g. a nested host)%s",
			g.desc, strings.ToUpper(accel), o.Timeout, last)}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "no error output"
	}
	return s
}

// cacheKey names what a verdict depends on: the host (a cache restored on
// another runner must not carry its verdict over), its kernel, QEMU and the
// probe guest.
func cacheKey(ctx context.Context, o Options, g guest) (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	ver, err := exec.CommandContext(ctx, o.QEMU, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", o.QEMU, err)
	}
	first, _, _ := strings.Cut(string(ver), "\n")
	return fmt.Sprintf("host=%s kernel=%s qemu=%q guest=%s", hostID(unix.ByteSliceToString(u.Nodename[:])),
		unix.ByteSliceToString(u.Release[:]), first, g.key), nil
}

// hostID is the host's name, machine ID and CPU model, hashed.
func hostID(nodename string) string {
	id, _ := os.ReadFile("/etc/machine-id")
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = l
				break
			}
		}
	}
	return hash([]byte(nodename + "\n" + strings.TrimSpace(string(id)) + "\n" + cpu))
}

func readCache(path, key string) (Verdict, bool) {
	if path == "" {
		return Verdict{}, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Verdict{}, false
	}
	var v Verdict
	if json.Unmarshal(b, &v) != nil || v.Key != key {
		return Verdict{}, false
	}
	v.Cached = true
	return v, true
}

func writeCache(path string, v Verdict) {
	if path == "" {
		return
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		klog.ErrorS(err, "KVM probe: cannot write the cache")
		return
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err == nil {
		err = os.Rename(tmp, path)
		if err != nil {
			klog.ErrorS(errors.Join(err, os.Remove(tmp)), "KVM probe: cannot write the cache")
		}
	}
}

// lockedBuffer collects QEMU's stderr; exec's copier writes while the
// probe may already read.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// set replaces the content (the probe keeps the guest's last line).
func (l *lockedBuffer) set(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
