package deviceplugin

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// deadline bounds every wait in these tests.
const deadline = 10 * time.Second

// fakeKubelet serves the kubelet's Registration service on dir/kubelet.sock.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.regs <- r
	return &pluginapi.Empty{}, nil
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	path := filepath.Join(dir, KubeletSocket)
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer(), regs: make(chan *pluginapi.RegisterRequest, 16)}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

// waitRegister returns the next registration.
func (k *fakeKubelet) waitRegister(t *testing.T) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.regs:
		return r
	case <-time.After(deadline):
		t.Fatal("no registration within", deadline)
		return nil
	}
}

// tempDir is short enough for unix socket paths.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// run runs p until the test ends.
func run(t *testing.T, p *Plugin) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(deadline):
			t.Error("Run did not return")
		}
	})
}

// testPlugin is a plugin on /dev/null whose health the test sets.
func testPlugin(dir string, health *atomic.Bool) *Plugin {
	return &Plugin{
		ResourceName:   "devices.kemu.dev/test",
		DevicePath:     "/dev/null",
		ContainerPath:  "/dev/test",
		Permissions:    "rw",
		Slots:          5,
		Health:         health.Load,
		Dir:            dir,
		HealthInterval: time.Hour, // the tests trigger checks with Check
		WatchInterval:  10 * time.Millisecond,
	}
}

// dial connects to a registered endpoint as the kubelet does.
func dial(t *testing.T, dir, endpoint string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

func listAndWatch(t *testing.T, c pluginapi.DevicePluginClient) grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	s, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// expect receives one device list and checks it has n devices, all with health h.
func expect(t *testing.T, s grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse], n int, h string) []*pluginapi.Device {
	t.Helper()
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Devices) != n {
		t.Fatalf("got %d devices, want %d", len(r.Devices), n)
	}
	ids := map[string]bool{}
	for _, d := range r.Devices {
		if d.Health != h {
			t.Fatalf("device %s is %s, want %s", d.ID, d.Health, h)
		}
		if ids[d.ID] {
			t.Fatalf("duplicate device ID %s", d.ID)
		}
		ids[d.ID] = true
	}
	return r.Devices
}

func TestRegisterListAllocate(t *testing.T) {
	dir := tempDir(t)
	k := startKubelet(t, dir)
	var health atomic.Bool
	health.Store(true)
	p := testPlugin(dir, &health)
	run(t, p)

	r := k.waitRegister(t)
	if r.Version != pluginapi.Version || r.ResourceName != "devices.kemu.dev/test" || r.Endpoint != "kemu-test.sock" {
		t.Fatalf("Register(%v)", r)
	}
	c := dial(t, dir, r.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil || opts.PreStartRequired || opts.GetPreferredAllocationAvailable {
		t.Fatalf("GetDevicePluginOptions = %v, %v", opts, err)
	}
	s := listAndWatch(t, c)
	devs := expect(t, s, 5, pluginapi.Healthy)

	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{devs[0].ID}},
		{DevicesIds: []string{devs[1].ID, devs[4].ID}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("Allocate: %d container responses", len(resp.ContainerResponses))
	}
	for _, cr := range resp.ContainerResponses {
		if len(cr.Devices) != 1 {
			t.Fatalf("Allocate: %v", cr)
		}
		d := cr.Devices[0]
		if d.HostPath != "/dev/null" || d.ContainerPath != "/dev/test" || d.Permissions != "rw" {
			t.Fatalf("Allocate: DeviceSpec %v", d)
		}
	}
	for _, bad := range []string{"nope", "test-5", "test-01", "kvm-1"} {
		_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{bad}}}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Allocate(%s) = %v, want InvalidArgument", bad, err)
		}
	}

	pre, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"test-0", "test-1", "test-2"}, MustIncludeDeviceIDs: []string{"test-2"}, AllocationSize: 2,
	}}})
	if err != nil || len(pre.ContainerResponses) != 1 || len(pre.ContainerResponses[0].DeviceIDs) != 2 || pre.ContainerResponses[0].DeviceIDs[0] != "test-2" {
		t.Fatalf("GetPreferredAllocation = %v, %v", pre, err)
	}
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"test-0"}}); err != nil {
		t.Fatal(err)
	}

	health.Store(false)
	p.Check()
	expect(t, s, 5, pluginapi.Unhealthy)
	if p.Healthy() {
		t.Fatal("Healthy() after the device went bad")
	}
	health.Store(true)
	p.Check()
	expect(t, s, 5, pluginapi.Healthy)
}

func TestHealthPolled(t *testing.T) {
	dir := tempDir(t)
	k := startKubelet(t, dir)
	var health atomic.Bool
	health.Store(true)
	p := testPlugin(dir, &health)
	p.HealthInterval = 10 * time.Millisecond
	run(t, p)
	s := listAndWatch(t, dial(t, dir, k.waitRegister(t).Endpoint))
	expect(t, s, 5, pluginapi.Healthy)
	health.Store(false)
	expect(t, s, 5, pluginapi.Unhealthy)
	health.Store(true)
	expect(t, s, 5, pluginapi.Healthy)
}

func TestRegistersOnlyWhenHealthy(t *testing.T) {
	dir := tempDir(t)
	k := startKubelet(t, dir)
	var health atomic.Bool
	p := testPlugin(dir, &health)
	m := &Manager{Plugins: []*Plugin{p}}
	run(t, p)
	// Unhealthy: served, but not advertised (a bounded wait of several
	// watch intervals for a registration that must not come).
	for end := time.Now().Add(deadline); !isSocket(p.SocketPath()); {
		if time.Now().After(end) {
			t.Fatal("plugin socket never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-k.regs:
		t.Fatalf("an unhealthy device registered: %v", r)
	case <-time.After(5 * p.WatchInterval):
	}
	if p.Registered() || !m.Ready() {
		t.Fatalf("unhealthy plugin: Registered %v, manager Ready %v; want false, true", p.Registered(), m.Ready())
	}
	health.Store(true)
	p.Check()
	s := listAndWatch(t, dial(t, dir, k.waitRegister(t).Endpoint))
	expect(t, s, 5, pluginapi.Healthy)
	waitRegistered(t, p, true)
	if !m.Ready() {
		t.Fatal("manager not Ready with its healthy plugin registered")
	}
	// Failing after registering: stays registered, reports Unhealthy.
	health.Store(false)
	p.Check()
	expect(t, s, 5, pluginapi.Unhealthy)
}

func TestKubeletRestart(t *testing.T) {
	dir := tempDir(t)
	k := startKubelet(t, dir)
	var health atomic.Bool
	health.Store(true)
	p := testPlugin(dir, &health)
	run(t, p)
	r := k.waitRegister(t)
	waitRegistered(t, p, true)

	// What a kubelet restart does: the old kubelet goes, kubelet.sock and
	// the plugin sockets are removed, a new kubelet serves a new kubelet.sock.
	k.srv.Stop() // closing the listener may already remove kubelet.sock
	if err := os.Remove(filepath.Join(dir, KubeletSocket)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, r.Endpoint)); err != nil {
		t.Fatal(err)
	}
	waitRegistered(t, p, false) // no kubelet.sock: registered with nobody
	k2 := startKubelet(t, dir)
	r2 := k2.waitRegister(t)
	if r2.Endpoint != r.Endpoint || r2.ResourceName != r.ResourceName || r2.Version != pluginapi.Version {
		t.Fatalf("re-Register(%v)", r2)
	}
	expect(t, listAndWatch(t, dial(t, dir, r2.Endpoint)), 5, pluginapi.Healthy)
	waitRegistered(t, p, true)
	if m := (&Manager{Plugins: []*Plugin{p}}); !m.Ready() {
		t.Error("Manager.Ready() false with its one plugin registered")
	}

	// Only kubelet.sock recreated (plugin socket left): register again too.
	k2.srv.Stop()
	k3 := startKubelet(t, dir)
	k3.waitRegister(t)

	// Only the plugin socket removed: the server restarts and registers.
	if err := os.Remove(filepath.Join(dir, r.Endpoint)); err != nil {
		t.Fatal(err)
	}
	k3.waitRegister(t)
	expect(t, listAndWatch(t, dial(t, dir, r.Endpoint)), 5, pluginapi.Healthy)
}

func TestKubeletLate(t *testing.T) {
	dir := tempDir(t)
	var health atomic.Bool
	health.Store(true)
	// A kubelet.sock nobody serves: registration fails and is retried.
	if err := os.WriteFile(filepath.Join(dir, KubeletSocket), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := testPlugin(dir, &health)
	run(t, p)
	// The plugin serves (and so has tried to register) before the kubelet comes.
	for end := time.Now().Add(deadline); !isSocket(p.SocketPath()); {
		if time.Now().After(end) {
			t.Fatal("plugin socket never appeared")
		}
		time.Sleep(time.Millisecond)
	}
	k := startKubelet(t, dir)
	if r := k.waitRegister(t); r.Endpoint != "kemu-test.sock" {
		t.Fatalf("Register(%v)", r)
	}
}

// isSocket reports whether path is a unix socket.
func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

func TestStopRemovesSocket(t *testing.T) {
	dir := tempDir(t)
	k := startKubelet(t, dir)
	var health atomic.Bool
	health.Store(true)
	p := testPlugin(dir, &health)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	k.waitRegister(t)
	if err := p.Run(ctx); err == nil {
		t.Fatal("second Run of a running plugin succeeded")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(deadline):
		t.Fatal("Run did not return")
	}
	if _, err := os.Stat(p.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after Run: %v", err)
	}
}

func TestTunAndVhostNet(t *testing.T) {
	dir := tempDir(t)
	tun, vhost := Tun(dir), VhostNet(dir)
	for _, p := range []*Plugin{tun, vhost} {
		p.Slots, p.WatchInterval = 3, 10*time.Millisecond
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun on this host")
	}
	if !IsCharDevice("/dev/net/tun") {
		t.Fatal("/dev/net/tun is not a char device")
	}
	_, err := os.Stat("/dev/vhost-net")
	vhostPresent := err == nil

	k := startKubelet(t, dir)
	run(t, tun)
	run(t, vhost)
	// Only working devices are advertised: vhost-net only where it exists.
	endpoints := map[string]string{}
	want := map[string]string{"devices.kemu.dev/tun": "kemu-tun.sock"}
	if vhostPresent {
		want["devices.kemu.dev/vhost-net"] = "kemu-vhost-net.sock"
	}
	for range want {
		r := k.waitRegister(t)
		endpoints[r.ResourceName] = r.Endpoint
	}
	if !maps.Equal(endpoints, want) {
		t.Fatalf("registered %v, want %v", endpoints, want)
	}
	for end := time.Now().Add(deadline); !isSocket(vhost.SocketPath()); {
		if time.Now().After(end) {
			t.Fatal("vhost-net plugin socket never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	expect(t, listAndWatch(t, dial(t, dir, "kemu-tun.sock")), 3, pluginapi.Healthy)
	health := pluginapi.Unhealthy
	if vhostPresent {
		health = pluginapi.Healthy
	}
	expect(t, listAndWatch(t, dial(t, dir, "kemu-vhost-net.sock")), 3, health)

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	resp, err := dial(t, dir, "kemu-tun.sock").Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"tun-2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.ContainerResponses[0].Devices[0]; d.HostPath != "/dev/net/tun" || d.ContainerPath != "/dev/net/tun" || d.Permissions != "rwm" {
		t.Fatalf("tun DeviceSpec %v", d)
	}
}

func TestKVMHealth(t *testing.T) {
	var calls atomic.Int32
	yes := func() bool { calls.Add(1); return true }
	h := probedDevice("/dev/null", yes)
	for range 3 {
		if !h() {
			t.Fatal("probed char device with a yes probe is unhealthy")
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("probe asked %d times, want once", calls.Load())
	}
	if probedDevice(filepath.Join(t.TempDir(), "kvm"), yes)() || calls.Load() != 1 {
		t.Fatal("absent device is healthy or was probed")
	}
	if probedDevice("/dev/null", func() bool { return false })() {
		t.Fatal("device with a no probe is healthy")
	}
	if probedDevice(t.TempDir(), nil)() {
		t.Fatal("a directory is healthy")
	}

	p := KVM("/x", func() bool { return false })
	if p.ResourceName != "devices.kemu.dev/kvm" || p.DevicePath != "/dev/kvm" || p.Dir != "/x" || p.Health() {
		t.Fatalf("KVM(no probe) = %+v, healthy %v", p, p.Health())
	}
	if got, want := KVM("/x", nil).Health(), IsCharDevice("/dev/kvm"); got != want {
		t.Fatalf("KVM(nil).Health() = %v, want %v", got, want)
	}
}

func TestDefaults(t *testing.T) {
	p := VhostNet("")
	if err := p.defaults(); err != nil {
		t.Fatal(err)
	}
	if p.Dir != DefaultDir || p.Socket != "kemu-vhost-net.sock" || p.Slots != DefaultSlots || p.Permissions != "rwm" ||
		p.ContainerPath != "/dev/vhost-net" || p.HealthInterval != DefaultHealthInterval || p.WatchInterval != DefaultWatchInterval {
		t.Fatalf("defaults: %+v", p)
	}
	if !p.validID("vhost-net-999") || p.validID("vhost-net-1000") || p.validID("vhost-net--1") || p.validID("vhost-net-") {
		t.Fatal("validID")
	}
	for _, bad := range []*Plugin{
		{DevicePath: "/dev/x"},
		{ResourceName: "x", DevicePath: "/dev/x"},
		{ResourceName: "a/x"},
		{ResourceName: "a/x", DevicePath: "/dev/x", Permissions: "rwx"},
		{ResourceName: "a/x", DevicePath: "/dev/x", Socket: "a/b.sock"},
		{ResourceName: "a/x", DevicePath: "/dev/x", Socket: KubeletSocket},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("defaults(%+v) accepted", bad)
		}
	}
}

func TestManager(t *testing.T) {
	dir := tempDir(t)
	k := startKubelet(t, dir)
	var health atomic.Bool
	health.Store(true)
	a, b := testPlugin(dir, &health), testPlugin(dir, &health)
	b.ResourceName = "devices.kemu.dev/other"

	if err := (&Manager{Plugins: []*Plugin{a, testPlugin(dir, &health)}}).Start(context.Background()); err == nil {
		t.Fatal("Start with a resource twice succeeded")
	}
	if err := (&Manager{Plugins: []*Plugin{{ResourceName: "bad"}}}).Start(context.Background()); err == nil {
		t.Fatal("Start with a bad plugin succeeded")
	}

	m := &Manager{Plugins: []*Plugin{a, b}}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
	got := map[string]bool{}
	for range 2 {
		got[k.waitRegister(t).ResourceName] = true
	}
	if !got["devices.kemu.dev/test"] || !got["devices.kemu.dev/other"] {
		t.Fatalf("registered %v", got)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Plugins {
		if _, err := os.Stat(p.SocketPath()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left after Stop: %v", p.SocketPath(), err)
		}
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
}

// waitRegistered polls p.Registered until it is want.
func waitRegistered(t *testing.T, p *Plugin, want bool) {
	t.Helper()
	for end := time.Now().Add(deadline); p.Registered() != want; {
		if time.Now().After(end) {
			t.Fatalf("Registered() stayed %v", !want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestManagerReadyOptional: an Optional plugin (KVM) whose device turned
// healthy but is not registered yet does not make the node unready.
func TestManagerReadyOptional(t *testing.T) {
	for _, tc := range []struct {
		name                string
		healthy, registered bool
		optional            bool
		want                bool
	}{
		{name: "healthy, registered", healthy: true, registered: true, want: true},
		{name: "healthy, not registered", healthy: true, want: false},
		{name: "unhealthy", want: true},
		{name: "optional, healthy, not registered", healthy: true, optional: true, want: true},
		{name: "optional, healthy, registered", healthy: true, registered: true, optional: true, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := &Plugin{ResourceName: "devices.kemu.dev/tun", healthy: true, registered: true}
			p := &Plugin{ResourceName: "devices.kemu.dev/x", healthy: tc.healthy, registered: tc.registered, Optional: tc.optional}
			if got := (&Manager{Plugins: []*Plugin{base, p}}).Ready(); got != tc.want {
				t.Errorf("Ready() = %v, want %v", got, tc.want)
			}
		})
	}
	if !KVM(t.TempDir(), nil).Optional {
		t.Error("the KVM plugin is not Optional")
	}
}
