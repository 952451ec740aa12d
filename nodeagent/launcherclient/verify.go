package launcherclient

import (
	"github.com/kemu-dev/kemu/api/launcherpod"

	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// Target is the launcher the node agent means to talk to: the launcher
// Pod whose sockets emptyDir holds the socket, and the VMI that launcher
// must run. Dial, Ready and Alive verify that what answers is that.
type Target struct {
	// KubeletRoot is the kubelet's --root-dir. It is the administrator's
	// and is opened as given (symlinks included); everything beneath it is
	// resolved without following any symlink.
	KubeletRoot string
	// PodUID is the launcher Pod's UID: its sockets directory is
	// <KubeletRoot>/pods/<PodUID>/volumes/kubernetes.io~empty-dir/sockets
	// and the process answering on launcher.sock must be in its cgroup.
	PodUID types.UID
	// VMIUID is the VMI's UID; the launcher's Info must report it (the
	// launcher Pod's --vmi-uid). Dial requires it.
	VMIUID types.UID
}

// SocketPath is the target's socket as a path (for messages: the socket
// is never opened by this path).
func (t Target) SocketPath() string { return SocketPath(t.KubeletRoot, t.PodUID) }

// validate checks that the target names one Pod directory.
func (t Target) validate() error {
	switch uid := string(t.PodUID); {
	case t.KubeletRoot == "":
		return errors.New("launcherclient: Target.KubeletRoot is empty")
	case uid == "" || uid == "." || uid == ".." || strings.ContainsAny(uid, "/\x00"):
		return fmt.Errorf("launcherclient: Target.PodUID %q is not a Pod UID", uid)
	}
	return nil
}

// ErrUnverified is wrapped by every refusal: what is at the launcher's
// socket, or the process answering on it, is not the launcher of the Pod
// and VMI asked for. Nothing is sent to it.
var ErrUnverified = errors.New("launcher not verified")

// Reasons of an UnverifiedError (used as the VMI condition's reason).
const (
	// ReasonSymlink: a symlink on the way from the kubelet root to the
	// socket (or the socket itself is one).
	ReasonSymlink = "SymlinkInPath"
	// ReasonNotADirectory: a component of the sockets directory's path is
	// not a directory.
	ReasonNotADirectory = "NotADirectory"
	// ReasonNotASocket: launcher.sock is not a unix socket (a regular file,
	// a FIFO, a device, a directory).
	ReasonNotASocket = "NotASocket"
	// ReasonPeerNotVisible: the process answering is in a PID namespace the
	// node agent cannot see (SO_PEERCRED pid 0: the agent lacks hostPID).
	ReasonPeerNotVisible = "PeerNotVisible"
	// ReasonPeerOutsidePod: the process answering is not in the Pod's
	// cgroup.
	ReasonPeerOutsidePod = "PeerOutsidePod"
	// ReasonVMIUIDMismatch: the launcher reports another VMI's UID (or
	// none).
	ReasonVMIUIDMismatch = "VMIUIDMismatch"
)

// UnverifiedError is a refusal to talk to what answers at a launcher
// socket. It wraps ErrUnverified.
type UnverifiedError struct {
	// Reason is one of the Reason constants.
	Reason string
	// Message says what was found (the path, what it is). It is fit for
	// the VMI's author: it names nothing of other Pods or of the host's
	// processes.
	Message string
	// Detail adds what only the node's administrator should see (the
	// process's pid and cgroups, another Pod's or VMI's UID); Error()
	// includes it, for the node agent's log.
	Detail string
}

func (e *UnverifiedError) Error() string {
	if e.Detail == "" {
		return "launcher not verified: " + e.Message
	}
	return "launcher not verified: " + e.Message + " (" + e.Detail + ")"
}

// Unwrap makes errors.Is(err, ErrUnverified) true.
func (e *UnverifiedError) Unwrap() error { return ErrUnverified }

func unverified(reason, format string, args ...any) *UnverifiedError {
	return &UnverifiedError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// resolveBeneath: no symlink, no magic link, nothing outside the
// directory the walk starts from.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// socketsDirNames are the names from the kubelet root down to a Pod's
// sockets emptyDir.
func socketsDirNames(podUID types.UID) []string {
	return []string{"pods", string(podUID), "volumes", "kubernetes.io~empty-dir", launcherpod.SocketsVolume}
}

// errNoSocket: the sockets directory is there, launcher.sock is not.
var errNoSocket = errors.New("no launcher socket")

// openSocket walks from the kubelet root to launcher.sock one name at a
// time, each with openat2(O_PATH|O_NOFOLLOW, RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) from the previous directory's
// descriptor, and fstat()s each: directories must be directories, the last
// a socket. It returns an O_PATH descriptor of the socket. Errors: an
// UnverifiedError; errNoSocket (wrapping fs.ErrNotExist) when only
// launcher.sock is missing; an *os.PathError wrapping fs.ErrNotExist when a
// directory is missing; other errors.
func (t Target) openSocket() (int, error) {
	return t.walk(append(socketsDirNames(t.PodUID), launcherpod.Socket), true)
}

// walk opens names from the kubelet root as openSocket does; the last is
// a socket when sock, else a directory (errNoSocket is then not used).
func (t Target) walk(names []string, sock bool) (int, error) {
	if err := t.validate(); err != nil {
		return -1, err
	}
	dir, err := unix.Open(t.KubeletRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: t.KubeletRoot, Err: err}
	}
	rel := ""
	for i, name := range names {
		last := i == len(names)-1 && sock
		rel = path.Join(rel, name)
		fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveBeneath})
		unix.Close(dir)
		full := filepath.Join(t.KubeletRoot, rel)
		switch {
		case errors.Is(err, unix.ENOENT) && last:
			return -1, fmt.Errorf("%s: %w: %w", full, errNoSocket, fs.ErrNotExist)
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return -1, unverified(ReasonSymlink, "%s: a symlink on the way; the node agent does not follow symlinks under the kubelet root", full)
		case err != nil:
			return -1, &os.PathError{Op: "openat2", Path: full, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, &os.PathError{Op: "fstat", Path: full, Err: err}
		}
		switch typ := st.Mode & unix.S_IFMT; {
		case typ == unix.S_IFLNK:
			unix.Close(fd)
			return -1, unverified(ReasonSymlink, "%s is a symlink; the node agent does not follow symlinks under the kubelet root", full)
		case last && typ != unix.S_IFSOCK:
			unix.Close(fd)
			return -1, unverified(ReasonNotASocket, "%s is a %s, not a unix socket", full, fileType(typ))
		case !last && typ != unix.S_IFDIR:
			unix.Close(fd)
			return -1, unverified(ReasonNotADirectory, "%s is a %s, not a directory", full, fileType(typ))
		}
		dir = fd
	}
	return dir, nil
}

func fileType(typ uint32) string {
	switch typ {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symlink"
	}
	return fmt.Sprintf("file of type %#o", typ)
}

// connect opens the target's socket without following symlinks, connects
// to exactly that inode (through /proc/self/fd/<its O_PATH descriptor), and
// checks the peer: a process in the Pod's cgroup. It returns the
// connection and the peer's pid. Nothing is written to the connection.
func (t Target) connect(ctx context.Context) (*net.UnixConn, int, error) {
	fd, err := t.openSocket()
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(fd)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, 0, fmt.Errorf("connecting to %s: %w", t.SocketPath(), err)
	}
	conn := c.(*net.UnixConn)
	pid, err := checkPeer(conn, t)
	if err != nil {
		_ = conn.Close()
		return nil, 0, err
	}
	return conn, pid, nil
}

// procRoot is where the peer's /proc/<pid>/cgroup is read.
const procRoot = "/proc"

// checkPeer reads the peer's credentials (SO_PEERCRED: the process that
// listens) and requires its pid to be visible and its cgroup to lie in the
// target Pod's. Where the kernel has SO_PEERPIDFD (Linux 6.5+), the
// process is checked to be still alive after its cgroup was read, so the
// pid cannot have been reused in between.
func checkPeer(conn *net.UnixConn, t Target) (int, error) {
	return checkPeerOn(conn, t, t.SocketPath())
}

// checkPeerOn is checkPeer for the socket at sock (named in messages).
func checkPeerOn(conn *net.UnixConn, t Target, sock string) (int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		cred       *unix.Ucred
		credErr    error
		pidfd      = -1
		pidfdErr   error
		controlErr error
	)
	controlErr = raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		pidfd, pidfdErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	})
	if controlErr != nil {
		return 0, controlErr
	}
	if pidfdErr == nil {
		defer unix.Close(pidfd)
	} else if !errors.Is(pidfdErr, unix.ENOPROTOOPT) {
		return 0, fmt.Errorf("%s: SO_PEERPIDFD: %w", sock, pidfdErr)
	} else {
		pidfd = -1 // an older kernel: SO_PEERCRED alone
	}
	if credErr != nil {
		return 0, fmt.Errorf("%s: SO_PEERCRED: %w", sock, credErr)
	}
	if cred.Pid <= 0 {
		u := unverified(ReasonPeerNotVisible, "the process answering on %s is in a PID namespace the node agent cannot see", sock)
		u.Detail = fmt.Sprintf("SO_PEERCRED pid %d; the node agent needs hostPID", cred.Pid)
		return 0, u
	}
	procCgroup := filepath.Join(procRoot, fmt.Sprint(cred.Pid), "cgroup")
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0, fmt.Errorf("%s: the peer's cgroup: %w", sock, err)
	}
	if pidfd >= 0 {
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			return 0, fmt.Errorf("%s: the peer (pid %d) exited while it was checked: %w", sock, cred.Pid, err)
		}
	}
	if err := CheckPodCgroup(string(b), t.PodUID); err != nil {
		u := unverified(ReasonPeerOutsidePod, "the process answering on %s is not in the cgroup of Pod %s", sock, t.PodUID)
		u.Detail = fmt.Sprintf("pid %d %v", cred.Pid, err)
		return 0, u
	}
	return int(cred.Pid), nil
}

// CheckPodCgroup checks a /proc/<pid>/cgroup: at least one hierarchy places
// the process in Pod podUID's cgroup and none in another Pod's. A line's
// Pod is the first path element that names one — the kubelet's cgroupfs
// driver names it pod<uid>, the systemd driver
// kubepods[-<qos>]-pod<uid with - as _>.slice — so cgroups a Pod makes
// inside its own (whatever their names) do not count. Paths relative to
// the reader's cgroup namespace ("/../../kubepods/...") work the same.
func CheckPodCgroup(procCgroup string, podUID types.UID) error {
	var ours bool
	var others []string
	sc := bufio.NewScanner(strings.NewReader(procCgroup))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch uid := podOfCgroupPath(parts[2]); uid {
		case "":
		case podUID:
			ours = true
		default:
			h := "cgroup v2"
			if parts[0] != "0" {
				h = "cgroup v1 " + parts[1]
			}
			others = append(others, fmt.Sprintf("%s (%s)", uid, h))
		}
	}
	switch {
	case len(others) > 0:
		return fmt.Errorf("is in the cgroup of Pod %s, not of Pod %s", strings.Join(others, ", "), podUID)
	case !ours:
		return fmt.Errorf("is in no Pod's cgroup (%s), not in Pod %s's", firstLines(procCgroup, 3), podUID)
	}
	return nil
}

// podOfCgroupPath returns the Pod UID of the first element of a cgroup
// path that names a kubelet Pod cgroup, "" if none does.
func podOfCgroupPath(p string) types.UID {
	for _, e := range strings.Split(strings.TrimSuffix(p, " (deleted)"), "/") {
		// cgroupfs driver: .../kubepods/burstable/pod<uid>/<container>
		if uid, ok := strings.CutPrefix(e, "pod"); ok && isPodUID(uid) {
			return types.UID(uid)
		}
		// systemd driver: .../kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope
		if name, ok := strings.CutSuffix(e, ".slice"); ok {
			i := strings.LastIndex(name, "-pod")
			if i < 0 {
				continue
			}
			if uid := strings.ReplaceAll(name[i+len("-pod"):], "_", "-"); isPodUID(uid) {
				return types.UID(uid)
			}
		}
	}
	return ""
}

// isPodUID: a UUID (API-server Pods) or 32 hex digits (static Pods' hash).
func isPodUID(s string) bool {
	if len(s) != 36 && len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && c != '-' {
			return false
		}
	}
	return true
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "; ")
}
