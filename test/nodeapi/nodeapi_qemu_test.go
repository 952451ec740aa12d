//go:build qemu

package nodeapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
	nodeagentapi "github.com/kemu-dev/kemu/nodeagent/nodeapi"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	ns, name = "default", "console"
	uid      = "11111111-2222-3333-4444-555555555555"
)

const vmiYAML = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: console, namespace: default, uid: 11111111-2222-3333-4444-555555555555}
spec:
  terminationGracePeriodSeconds: 30
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, bootOrder: 1, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// TestNodeAPI: kemu-api reaches a real launcher's console and guest agent
// through the node agent's API over mutual TLS; nobody else does.
func TestNodeAPI(t *testing.T) {
	p := newPKI(t)
	srvLauncher, client := startLauncher(t)
	vmiJSON, err := yaml.YAMLToJSON([]byte(vmiYAML))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 8*time.Minute)
	if _, err := client.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON}); err != nil {
		t.Fatal(err)
	}
	ls := newLaunchers(ns, name, uid, client)
	srv, err := nodeagentapi.Listen(ctx, "127.0.0.1:0", nodeagentapi.Config{Store: migrationproxy.NewStore(p.node), Launchers: ls})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr := srv.Addr().String()
	kemuAPI := p.tlsConfig(p.client)

	// The console from right after the start: the guest boots to its
	// ready marker (its login prompt) and the tty echoes what is typed.
	con, _, err := openStream(ctx, addr, kemuAPI, ns, name, uid, nodeapi.Console)
	if err != nil {
		t.Fatal(err)
	}
	w := testguest.NewWatcher(con)
	if _, err := w.WaitKind(ctxFor(t, bootTimeout), testguest.KindReady); err != nil {
		t.Fatalf("console: no ready marker: %v\n%s", err, w.Tail(20))
	}
	if _, err := con.conn.Write([]byte("kemu-echo-4711\n")); err != nil {
		t.Fatal(err)
	}
	if err := waitLog(ctxFor(t, stepTimeout), w, "kemu-echo-4711"); err != nil {
		t.Errorf("console round trip: %v\n%s", err, w.Tail(20))
	}

	t.Run("refusals", func(t *testing.T) {
		// A node's certificate (any node's) is not kemu-api.
		if _, _, err := get(ctx, addr, p.tlsConfig(*p.node.TLSCertificate()), ns, name, uid, nodeapi.GuestOSInfo); err == nil {
			t.Error("a node certificate as client was served")
		}
		if _, _, err := openStream(ctx, addr, p.tlsConfig(*p.node.TLSCertificate()), ns, name, uid, nodeapi.Console); err == nil {
			t.Error("a node certificate as client opened the console")
		}
		// No client certificate.
		if _, _, err := get(ctx, addr, (&tls13NoCert{p}).config(), ns, name, uid, nodeapi.GuestOSInfo); err == nil {
			t.Error("served without a client certificate")
		}
		for _, tc := range []struct {
			what, name, uid, verb string
			code                  int
		}{
			{"wrong UID", name, "99999999-2222-3333-4444-555555555555", nodeapi.GuestOSInfo, http.StatusConflict},
			{"no UID", name, "", nodeapi.GuestOSInfo, http.StatusBadRequest},
			{"VMI not here", "other", uid, nodeapi.GuestOSInfo, http.StatusNotFound},
			{"unknown verb", name, uid, "exec", http.StatusNotFound},
			{"console without Upgrade", name, uid, nodeapi.Console, http.StatusUpgradeRequired},
		} {
			resp, body, err := get(ctx, addr, kemuAPI, ns, tc.name, tc.uid, tc.verb)
			if err != nil {
				t.Fatalf("%s: %v", tc.what, err)
			}
			if resp.StatusCode != tc.code || !strings.Contains(string(body), `"kind":"Status"`) {
				t.Errorf("%s: %d %s, want %d and a Status", tc.what, resp.StatusCode, body, tc.code)
			}
		}
		if _, code, err := openStream(ctx, addr, kemuAPI, ns, name, "99999999-2222-3333-4444-555555555555", nodeapi.Console); err == nil || code != http.StatusConflict {
			t.Errorf("console with a wrong UID: %d %v", code, err)
		}
	})

	t.Run("stats", func(t *testing.T) {
		stats := func() (subresources.VirtualMachineInstanceStats, error) {
			var st subresources.VirtualMachineInstanceStats
			resp, body, err := get(ctx, addr, kemuAPI, ns, name, uid, nodeapi.Stats)
			if err != nil {
				return st, err
			}
			if resp.StatusCode != http.StatusOK {
				return st, errors.New(resp.Status + ": " + string(body))
			}
			return st, json.Unmarshal(body, &st)
		}
		// The guest booted from its root disk on one vCPU; its balloon
		// driver reports once QEMU polled it.
		var first subresources.VirtualMachineInstanceStats
		err := poll(ctxFor(t, bootTimeout), func() error {
			st, err := stats()
			if err != nil {
				return err
			}
			first = st
			if st.CPU.VCPUs != 1 || st.CPU.VCPUNanoSeconds <= 0 || len(st.Drives) != 1 || st.Memory.GuestTotalBytes == nil {
				return fmt.Errorf("not all figures yet: %+v", st)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		m := first.Memory
		if first.Kind != subresources.StatsKind || first.APIVersion != subresources.GroupVersion {
			t.Errorf("stats: kind %q apiVersion %q", first.Kind, first.APIVersion)
		}
		if d := first.Drives[0]; d.Name != "root" || d.ReadBytes <= 0 || d.ReadOps <= 0 {
			t.Errorf("stats: drive %+v, want root with the boot's reads", d)
		}
		// No pod network here (autoattachPodInterface: false): no interface,
		// an empty list (test/vmimetrics proves a tap's counters in GetStats).
		if first.Interfaces == nil || len(first.Interfaces) != 0 {
			t.Errorf("stats: interfaces %+v, want []", first.Interfaces)
		}
		if *m.GuestTotalBytes <= 0 || *m.GuestTotalBytes > 256<<20 || m.GuestUsedBytes == nil || *m.GuestUsedBytes > *m.GuestTotalBytes ||
			m.QEMUResidentBytes == nil || *m.QEMUResidentBytes <= 0 || m.BalloonActualBytes == nil || *m.BalloonActualBytes != 256<<20 {
			t.Errorf("stats: memory %+v", m)
		}
		if time.Since(first.Time.Time).Abs() > time.Minute {
			t.Errorf("stats: time %v, now %v", first.Time, time.Now())
		}
		// Fresh on every call: a later sample is later and its counters
		// have not gone back.
		var second subresources.VirtualMachineInstanceStats
		err = poll(ctxFor(t, stepTimeout), func() error {
			st, err := stats()
			if err != nil {
				return err
			}
			second = st
			if !st.Time.After(first.Time.Time) || st.CPU.VCPUNanoSeconds <= first.CPU.VCPUNanoSeconds {
				return fmt.Errorf("no later sample: %v %d after %v %d", st.Time, st.CPU.VCPUNanoSeconds, first.Time, first.CPU.VCPUNanoSeconds)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(second.Drives) != 1 || second.Drives[0].ReadBytes < first.Drives[0].ReadBytes {
			t.Errorf("stats: drives %+v after %+v", second.Drives, first.Drives)
		}
	})

	t.Run("guestosinfo", func(t *testing.T) {
		// The node agent's probe (nodeagent/vmi) pings the guest agent
		// until it answers; the domain then reports it connected.
		err := poll(ctxFor(t, bootTimeout), func() error {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := client.GuestPing(pctx, &rpc.Empty{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var info subresources.GuestAgentInfo
		err = poll(ctxFor(t, bootTimeout), func() error {
			resp, body, err := get(ctx, addr, kemuAPI, ns, name, uid, nodeapi.GuestOSInfo)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return errors.New(resp.Status + ": " + string(body))
			}
			return json.Unmarshal(body, &info)
		})
		if err != nil {
			t.Fatal(err)
		}
		if info.OS.ID != "kemu-testguest" || info.GAVersion == "" || info.Hostname == "" || info.OS.KernelRelease == "" || len(info.Interfaces) == 0 {
			t.Errorf("guestosinfo: %+v", info)
		}
	})

	t.Run("a newer console connection ends the older one", func(t *testing.T) {
		second, _, err := openStream(ctx, addr, kemuAPI, ns, name, uid, nodeapi.Console)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.Done():
		case <-ctx.Done():
			t.Fatal("the first console did not end")
		}
		if w.Err() != nil {
			t.Errorf("the first console ended with %v, want EOF", w.Err())
		}
		// Half-closed by the client: the output goes on until the
		// launcher's entry ends, then EOF.
		if err := second.conn.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		ls.drop()
		waitEOF(t, second, "launcher entry ended")
		ls.readd()
	})

	t.Run("streams end when the server closes", func(t *testing.T) {
		other, err := nodeagentapi.Listen(ctx, "127.0.0.1:0", nodeagentapi.Config{Store: migrationproxy.NewStore(p.node), Launchers: ls})
		if err != nil {
			t.Fatal(err)
		}
		con, _, err := openStream(ctx, other.Addr().String(), kemuAPI, ns, name, uid, nodeapi.Console)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Close(); err != nil {
			t.Error(err)
		}
		waitEOF(t, con, "server closed")
	})

	t.Run("the console ends when the launcher stops", func(t *testing.T) {
		con, _, err := openStream(ctx, addr, kemuAPI, ns, name, uid, nodeapi.Console)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); waitEOF(t, con, "launcher stopped") }()
		if _, err := srvLauncher.Launcher().Kill(ctxFor(t, stepTimeout)); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		// The launcher's VM is gone: not running.
		for _, verb := range []string{nodeapi.GuestOSInfo, nodeapi.Stats} {
			resp, body, err := get(ctx, addr, kemuAPI, ns, name, uid, verb)
			if err != nil {
				t.Errorf("%s after the stop: %v", verb, err)
			} else if resp.StatusCode != http.StatusConflict {
				t.Errorf("%s after the stop: %s %s, want 409", verb, resp.Status, body)
			}
		}
	})

	// No goroutine of the API is left once its servers are closed.
	if err := srv.Close(); err != nil {
		t.Error(err)
	}
	err = poll(ctxFor(t, 10*time.Second), func() error {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if strings.Contains(stacks, "kemu/nodeagent/nodeapi.") {
			return errors.New("goroutines left:\n" + stacks)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// tls13NoCert is kemu-api's TLS configuration without a client
// certificate.
type tls13NoCert struct{ p *pki }

func (n *tls13NoCert) config() *tls.Config {
	c := n.p.tlsConfig(tls.Certificate{})
	c.Certificates = nil
	return c
}

func waitLog(ctx context.Context, w *testguest.Watcher, s string) error {
	return poll(ctx, func() error {
		if strings.Contains(w.Log(), s) {
			return nil
		}
		return errors.New("not seen yet")
	})
}

func poll(ctx context.Context, f func() error) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-tick.C:
		}
	}
}
