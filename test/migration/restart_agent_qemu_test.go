//go:build qemu

package migration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// The test binary doubles as a node agent's migration proxy in its own
// process, so that killing it is a real process death: with
// restartAgentDirEnv set, init runs the agent and exits instead of the
// tests. The agent reads its certificate from that directory (ca.crt,
// tls.crt, tls.key, as the node agent's Secret holds them), listens on
// restartAgentAddrEnv (127.0.0.1:0 when empty), prints "listening ADDR",
// and answers one line per command read from stdin:
//
//	register UID SOURCE-NODE CHANNEL=SOCKET...      → ok
//	unregister UID                                  → ok
//	source UID DIR TARGET-ADDR TARGET-NODE CHANNEL... → ok CHANNEL=SOCKET...
//	close-source UID                                → ok
//
// An error answers "error MESSAGE". The agent ends when stdin closes.
const (
	restartAgentDirEnv  = "KEMU_TEST_MIGRATION_AGENT_DIR"
	restartAgentAddrEnv = "KEMU_TEST_MIGRATION_AGENT_ADDR"
)

func init() {
	dir := os.Getenv(restartAgentDirEnv)
	if dir == "" {
		return
	}
	if err := restartAgentMain(dir, os.Getenv(restartAgentAddrEnv), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "migration agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// restartAgentMaterial reads a node's certificate files from dir.
func restartAgentMaterial(dir string) (*migrationproxy.Material, error) {
	data := map[string][]byte{}
	for _, k := range []string{migrationproxy.CACertKey, migrationproxy.TLSCertKey, migrationproxy.TLSKeyKey} {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil {
			return nil, err
		}
		data[k] = b
	}
	return migrationproxy.MaterialFromSecretData(data)
}

func restartAgentMain(dir, addr string, in io.Reader, out io.Writer) error {
	m, err := restartAgentMaterial(dir)
	if err != nil {
		return fmt.Errorf("certificate: %w", err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	store := migrationproxy.NewStore(m)
	srv, err := migrationproxy.Listen(context.Background(), addr, store)
	if err != nil {
		return err
	}
	a := &restartAgentState{srv: srv, store: store, sources: map[string]*migrationproxy.Source{}}
	defer a.close()
	if _, err := fmt.Fprintf(out, "listening %s\n", srv.Addr()); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		reply, err := a.command(strings.Fields(sc.Text()))
		if err != nil {
			reply = "error " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		if _, err := fmt.Fprintln(out, reply); err != nil {
			return err
		}
	}
	return sc.Err()
}

type restartAgentState struct {
	srv     *migrationproxy.Server
	store   *migrationproxy.Store
	sources map[string]*migrationproxy.Source
}

func (a *restartAgentState) command(f []string) (string, error) {
	if len(f) < 2 {
		return "", fmt.Errorf("short command %q", f)
	}
	uid := f[1]
	switch {
	case f[0] == "register" && len(f) >= 3:
		socks := map[string]string{}
		for _, kv := range f[3:] {
			ch, path, ok := strings.Cut(kv, "=")
			if !ok {
				return "", fmt.Errorf("socket %q: want CHANNEL=PATH", kv)
			}
			socks[ch] = path
		}
		return "ok", a.srv.Register(uid, f[2], socks)
	case f[0] == "unregister":
		a.srv.Unregister(uid)
		return "ok", nil
	case f[0] == "source" && len(f) >= 6:
		if _, dup := a.sources[uid]; dup {
			return "", fmt.Errorf("source %s already open", uid)
		}
		s, err := migrationproxy.ListenSource(context.Background(), f[2], uid, f[5:], migrationproxy.Target{Addr: f[3], Node: f[4]}, a.store)
		if err != nil {
			return "", err
		}
		a.sources[uid] = s
		reply := []string{"ok"}
		for ch, p := range s.Paths() {
			reply = append(reply, ch+"="+p)
		}
		return strings.Join(reply, " "), nil
	case f[0] == "close-source":
		s, ok := a.sources[uid]
		if !ok {
			return "ok", nil
		}
		delete(a.sources, uid)
		return "ok", s.Close()
	}
	return "", fmt.Errorf("unknown command %q", f)
}

func (a *restartAgentState) close() {
	var errs []error
	for _, s := range a.sources {
		errs = append(errs, s.Close())
	}
	errs = append(errs, a.srv.Close())
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "migration agent close:", err)
	}
}
