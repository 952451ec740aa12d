//go:build cluster

package verbs

import (
	"bufio"
	"context"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/cli/clitest"
	"github.com/kemu-dev/kemu/ctl/shell"
	"github.com/kemu-dev/kemu/test/cluster"
)

// standInNodes stands in for the node agents (the real path, through the
// node agent to the launcher's console and QEMU's VNC server, is proven in
// the e2e suite): a vnc stream sends an RFB greeting, then echoes; a
// console stream echoes until it gets "quit", then ends as a VMI's console
// does when the VMI stops. What this test proves is kemuctl's side: the
// local port splicing, one stream per connection, the console's copy and
// the close reasons, through a real kube-apiserver and kemu-api.
type standInNodes struct {
	mu     sync.Mutex
	opened []string
}

const rfbGreeting = "RFB 003.008\n"

func (n *standInNodes) Stream(_ context.Context, vmi *v1.VirtualMachineInstance, verb string) (io.ReadWriteCloser, error) {
	n.mu.Lock()
	n.opened = append(n.opened, verb+" "+vmi.Name)
	n.mu.Unlock()
	a, b := net.Pipe()
	go func() {
		defer b.Close()
		if verb == "vnc" {
			if _, err := b.Write([]byte(rfbGreeting)); err != nil {
				return
			}
		}
		buf := make([]byte, 4096)
		for {
			k, err := b.Read(buf)
			if err != nil || strings.Contains(string(buf[:k]), "quit") {
				return
			}
			if _, err := b.Write(buf[:k]); err != nil {
				return
			}
		}
	}()
	return a, nil
}

func (*standInNodes) Get(context.Context, *v1.VirtualMachineInstance, string, any) error { return nil }

func (n *standInNodes) streams() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.opened...)
}

// TestConsoleAndVNCStreams runs kemuctl console and vnc through a real
// kube-apiserver and kemu-api in process, with the node agents stood in
// for. Needs make k8s.
func TestConsoleAndVNCStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startCRDCluster(ctx, t, cluster.Options{})
	nodes := &standInNodes{}
	startKemuAPI(ctx, t, c, nodes)
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	const ns = "default"
	createVMI(ctx, t, kemu, ns, "a", v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node1"})
	createVMI(ctx, t, kemu, ns, "b", v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled})

	// The console from a pipe: the echo is printed, the console is left
	// once the input ended and the output is quiet.
	t0 := time.Now()
	stdout, stderr, code := run(t, "hello\r", "console", "a", "--kubeconfig", c.Kubeconfig)
	if code != 0 || stdout != "hello\r" {
		t.Errorf("console: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if d := time.Since(t0); d < shell.ConsoleDrain {
		t.Errorf("the console left %s after its input ended, before the output was quiet for %s", d, shell.ConsoleDrain)
	}
	// Ctrl-] leaves at once; it and what follows it are not sent.
	stdout, stderr, code = run(t, "ab\x1dcd\n", "console", "a", "--kubeconfig", c.Kubeconfig)
	if code != 0 || strings.Contains(stdout, "cd") || strings.Contains(stdout, "\x1d") {
		t.Errorf("console with Ctrl-]: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// On a terminal: raw mode (input without a newline reaches the
	// guest), Ctrl-] leaves.
	sc, exited, typeIn := startOnPTY(t, "console", "a", "--kubeconfig", c.Kubeconfig)
	const limit = 30 * time.Second
	clitest.WaitFor(t, "the console", limit, sc, func(out string) bool {
		return strings.Contains(out, "connected to the serial console of VMI default/a; Ctrl-] leaves")
	})
	typeIn("hi")
	clitest.WaitFor(t, "the echo of hi (raw mode)", limit, sc, func(out string) bool { return strings.Contains(out, "hi") })
	typeIn("\x1d")
	waitExit(t, "Ctrl-]", exited, sc, limit)
	if !strings.Contains(sc.String(), "left the serial console") {
		t.Errorf("terminal: %q", sc.String())
	}
	// The console ending on the node: kemuctl says why.
	stdout, stderr, code = run(t, "quit", "console", "a", "--kubeconfig", c.Kubeconfig)
	if want := "kemuctl console: the stream was closed: the console ended on the node (the VMI stopped, or its node agent went away)"; code != 0 ||
		!strings.Contains(stderr, want) {
		t.Errorf("console ended on the node: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
	if _, stderr, code = run(t, "", "console", "b", "--kubeconfig", c.Kubeconfig); code != 1 ||
		stderr != "kemuctl console: VMI default/b is not running (phase Scheduled)\n" {
		t.Errorf("console of a scheduled VMI: exit %d, %q", code, stderr)
	}
	if _, stderr, code = run(t, "", "vnc", "nope", "--kubeconfig", c.Kubeconfig); code != 1 ||
		stderr != "kemuctl vnc: VMI default/nope not found\n" {
		t.Errorf("vnc of a missing VMI: exit %d, %q", code, stderr)
	}

	// kemuctl vnc: a free port on loopback, printed; each connection its
	// own stream, both ways; Ctrl-C (here: the context) ends it.
	var out, errOut clitest.Screen
	root := newRoot()
	root.SetArgs([]string{"vnc", "a", "--kubeconfig", c.Kubeconfig})
	root.SetIn(strings.NewReader(""))
	root.SetOut(&out)
	root.SetErr(&errOut)
	vncCtx, stopVNC := context.WithCancel(ctx)
	defer stopVNC()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(vncCtx) }()
	addrRE := regexp.MustCompile(`^VNC of VMI default/a on (127\.0\.0\.1:\d+); Ctrl-C ends\n$`)
	clitest.WaitFor(t, "kemuctl vnc's address", time.Minute, &out, addrRE.MatchString)
	addr := addrRE.FindStringSubmatch(out.String())[1]

	var conns []net.Conn
	for i, msg := range []string{"RFB 003.008\n", strings.Repeat("pixels", 20000)} {
		conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		r := bufio.NewReader(conn)
		greeting, err := r.ReadString('\n')
		if err != nil || greeting != rfbGreeting {
			t.Fatalf("connection %d: greeting %q, %v", i, greeting, err)
		}
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(r, buf); err != nil || string(buf) != msg {
			t.Fatalf("connection %d: echo of %d bytes: %v", i, len(msg), err)
		}
	}
	if got := nodes.streams(); strings.Join(got, ",") != "console a,console a,console a,console a,vnc a,vnc a" {
		t.Errorf("node streams %q, want two consoles and one vnc stream per connection", got)
	}
	// A stream ended by the node: the connection closes, kemuctl vnc says
	// why and keeps listening.
	if _, err := conns[0].Write([]byte("quit")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(conns[0]); err != nil {
		t.Errorf("connection 0 after its stream ended: %v", err)
	}
	clitest.WaitFor(t, "the reason the vnc stream ended", time.Minute, &errOut, func(s string) bool {
		return strings.Contains(s, "the stream was closed: the vnc ended on the node")
	})

	stopVNC()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("kemuctl vnc after Ctrl-C: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kemuctl vnc did not end after Ctrl-C")
	}
	// Its connections end with it.
	_ = conns[1].SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(conns[1]); err != nil {
		t.Errorf("connection 1 after kemuctl vnc ended: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("kemuctl vnc still listens after Ctrl-C")
	}
}
