package launcherclient

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/api/launcherpod"
)

// A migration's sockets live in the launcher Pod's volumes, which the
// Pod (root in its container) writes: the node agent reaches them as it
// reaches launcher.sock, from the kubelet root without following any
// symlink, and talks only to a process of the Pod.

// runtimeDirNames are the names from the kubelet root down to the
// launcher's runtime directory (launcherpod.RuntimeDir) in the Pod's
// private emptyDir, where a migration target's launcher and QEMU listen.
func runtimeDirNames(podUID types.UID) []string {
	names := []string{"pods", string(podUID), "volumes", "kubernetes.io~empty-dir", launcherpod.PrivateVolume}
	rel := strings.TrimPrefix(launcherpod.RuntimeDir, launcherpod.PrivateDir+"/")
	return append(names, strings.Split(rel, "/")...)
}

// RuntimeDir is the host path of a launcher Pod's runtime directory (for
// messages: it is never opened by this path).
func RuntimeDir(kubeletRoot string, podUID types.UID) string {
	return filepath.Join(append([]string{kubeletRoot}, runtimeDirNames(podUID)...)...)
}

// validName: one file name, nothing that walks elsewhere.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("launcherclient: %q is not a file name", name)
	}
	return nil
}

// DialRuntimeSocket connects to the unix socket name in the target Pod's
// runtime directory (a migration target's migration.sock, NBD and control
// sockets), verified as launcher.sock is: reached without symlinks, a
// socket, connected through /proc/self/fd/<its O_PATH descriptor>, and the
// listening process in the Pod's cgroup. Refusals wrap ErrUnverified;
// a missing socket wraps fs.ErrNotExist.
func DialRuntimeSocket(ctx context.Context, t Target, name string) (*net.UnixConn, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	fd, err := t.walk(append(runtimeDirNames(t.PodUID), name), true)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	sock := filepath.Join(RuntimeDir(t.KubeletRoot, t.PodUID), name)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", sock, err)
	}
	conn := c.(*net.UnixConn)
	if _, err := checkPeerOn(conn, t, sock); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// OpenSocketsDir opens the target Pod's sockets directory, reached without
// following symlinks, as an O_PATH descriptor: a migration source's unix
// listeners are bound through /proc/self/fd/<fd>/<name>, so a symlink the
// Pod plants on the way never redirects them. The caller closes it once
// the listeners are gone.
func OpenSocketsDir(t Target) (*os.File, error) {
	fd, err := t.walk(socketsDirNames(t.PodUID), false)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), SocketsDir(t.KubeletRoot, t.PodUID)), nil
}

// FDPath is the path through which f's directory is reached without a
// new lookup of its name (/proc/self/fd/<fd>).
func FDPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }
