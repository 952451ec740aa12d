// Package deviceplugin advertises shareable host devices (/dev/kvm,
// /dev/net/tun, /dev/vhost-net) to the kubelet through the device plugin API
// (k8s.io/kubelet deviceplugin v1beta1), so launcher pods can request them as
// extended resources (devices.kemu.dev/kvm, ...).
//
// A Plugin serves the DevicePlugin service on its own unix socket in the
// kubelet's device-plugin directory, registers with the kubelet's
// kubelet.sock there, and advertises Slots fake device IDs that all map to the
// same host device node.
//
// Health: a plugin always registers, even when its device is absent or does
// not work; it then reports all of its devices Unhealthy, so the node's
// allocatable count for the resource is 0 (this is what KubeVirt does). When
// the device appears or starts working, the next health check re-sends the
// devices Healthy, and no restart or re-registration is needed.
//
// Kubelet restarts: the kubelet recreates kubelet.sock and deletes the plugin
// sockets in the directory. The plugin polls the directory (no fsnotify in
// the module graph) and, when its socket is gone, restarts its server and
// registers again; when kubelet.sock was recreated (or registration failed
// before), it registers again.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kemu-dev/kemu/api/launcherpod"
)

// Defaults of a Plugin's settings.
const (
	DefaultDir            = "/var/lib/kubelet/device-plugins"
	DefaultSlots          = 1000
	DefaultPermissions    = "rwm"
	DefaultHealthInterval = 10 * time.Second
	DefaultWatchInterval  = time.Second
	// KubeletSocket is the kubelet's registration socket's name in Dir.
	KubeletSocket = "kubelet.sock"
	// registerTimeout bounds one Register call to the kubelet.
	registerTimeout = 5 * time.Second
)

// Plugin advertises one shareable host device. Set the exported fields, then
// call Run (or use a Manager). A Plugin runs at most once at a time.
type Plugin struct {
	// ResourceName is the extended resource, e.g. "devices.kemu.dev/kvm".
	ResourceName string
	// DevicePath is the device node on the host, e.g. "/dev/kvm".
	DevicePath string
	// ContainerPath is where the device appears in the container
	// (default DevicePath).
	ContainerPath string
	// Permissions are the cgroup permissions given to the container
	// (default "rwm").
	Permissions string
	// Slots is how many shareable device IDs are advertised (default 1000).
	Slots int
	// Health reports whether the device exists and works. It is called once
	// before the server starts, every HealthInterval and on Check, so it
	// should be quick (KVM keeps its probe's answer). nil means "DevicePath
	// is a character device".
	Health func() bool
	// Dir is the kubelet's device-plugin directory, which holds
	// kubelet.sock and the plugin's socket (default DefaultDir).
	Dir string
	// Socket is the plugin's socket name in Dir (default "kemu-<last
	// segment of ResourceName>.sock", e.g. "kemu-kvm.sock").
	Socket string
	// HealthInterval is how often Health is polled (default 10 s).
	HealthInterval time.Duration
	// WatchInterval is how often Dir is polled for a kubelet restart
	// (default 1 s).
	WatchInterval time.Duration
	// Optional plugins do not hold the node back (Manager.Ready): VMs run
	// without their device (KVM: guests then run under TCG).
	Optional bool

	mu         sync.Mutex
	healthy    bool
	registered bool          // with the kubelet whose socket is present now
	changed    chan struct{} // closed and replaced when healthy changes
	checkc     chan struct{} // Check's trigger
	running    bool
}

// Tun is the plugin for /dev/net/tun (devices.kemu.dev/tun), healthy while
// the node exists and is a character device.
func Tun(dir string) *Plugin {
	return &Plugin{ResourceName: string(launcherpod.ResourceTun), DevicePath: "/dev/net/tun", Dir: dir}
}

// VhostNet is the plugin for /dev/vhost-net (devices.kemu.dev/vhost-net),
// healthy while the node exists and is a character device.
func VhostNet(dir string) *Plugin {
	return &Plugin{ResourceName: string(launcherpod.ResourceVhostNet), DevicePath: "/dev/vhost-net", Dir: dir}
}

// KVM is the plugin for /dev/kvm (devices.kemu.dev/kvm). It is healthy while
// /dev/kvm is a character device and probe (e.g. kvm.Probe(...).Usable) says
// KVM runs guests. probe is asked once and its answer kept until /dev/kvm
// disappears, so an expensive probe is not repeated on every health check;
// nil probe means the device node alone decides. The plugin is Optional:
// a node runs VMs under TCG without it, so a slow probe (it runs in the
// plugin's first health check) does not hold the node back.
func KVM(dir string, probe func() bool) *Plugin {
	const dev = "/dev/kvm"
	return &Plugin{ResourceName: string(launcherpod.ResourceKVM), DevicePath: dev, Dir: dir, Health: probedDevice(dev, probe), Optional: true}
}

// probedDevice is healthy while path is a character device and probe, asked
// once per appearance of the device, said yes.
func probedDevice(path string, probe func() bool) func() bool {
	var (
		mu          sync.Mutex
		known, isOK bool
	)
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if !IsCharDevice(path) {
			known = false
			return false
		}
		if probe == nil {
			return true
		}
		if !known {
			isOK, known = probe(), true
		}
		return isOK
	}
}

// IsCharDevice reports whether path exists and is a character device.
func IsCharDevice(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// settings is a copy of p's settings, without its state.
func (p *Plugin) settings() *Plugin {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &Plugin{
		ResourceName: p.ResourceName, DevicePath: p.DevicePath, ContainerPath: p.ContainerPath,
		Permissions: p.Permissions, Slots: p.Slots, Health: p.Health, Dir: p.Dir, Socket: p.Socket,
		HealthInterval: p.HealthInterval, WatchInterval: p.WatchInterval,
	}
}

// defaults fills the unset settings and checks the rest.
func (p *Plugin) defaults() error {
	if p.ResourceName == "" || !strings.Contains(p.ResourceName, "/") {
		return fmt.Errorf("deviceplugin: resource name %q is not <domain>/<name>", p.ResourceName)
	}
	if p.DevicePath == "" {
		return fmt.Errorf("deviceplugin %s: no device path", p.ResourceName)
	}
	if p.ContainerPath == "" {
		p.ContainerPath = p.DevicePath
	}
	if p.Permissions == "" {
		p.Permissions = DefaultPermissions
	}
	for _, c := range p.Permissions {
		if !strings.ContainsRune("rwm", c) {
			return fmt.Errorf("deviceplugin %s: permissions %q are not a subset of rwm", p.ResourceName, p.Permissions)
		}
	}
	if p.Slots <= 0 {
		p.Slots = DefaultSlots
	}
	if p.Health == nil {
		path := p.DevicePath
		p.Health = func() bool { return IsCharDevice(path) }
	}
	if p.Dir == "" {
		p.Dir = DefaultDir
	}
	if p.Socket == "" {
		p.Socket = p.defaultSocket()
	}
	if strings.Contains(p.Socket, "/") || p.Socket == KubeletSocket {
		return fmt.Errorf("deviceplugin %s: bad socket name %q", p.ResourceName, p.Socket)
	}
	if p.HealthInterval <= 0 {
		p.HealthInterval = DefaultHealthInterval
	}
	if p.WatchInterval <= 0 {
		p.WatchInterval = DefaultWatchInterval
	}
	return nil
}

// SocketPath is the plugin's socket, Dir/Socket or their defaults.
func (p *Plugin) SocketPath() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	dir, socket := p.Dir, p.Socket
	if dir == "" {
		dir = DefaultDir
	}
	if socket == "" {
		socket = p.defaultSocket()
	}
	return filepath.Join(dir, socket)
}

// defaultSocket is "kemu-<last segment of ResourceName>.sock".
func (p *Plugin) defaultSocket() string {
	return "kemu-" + p.ResourceName[strings.LastIndex(p.ResourceName, "/")+1:] + ".sock"
}

// Healthy is the health last reported to the kubelet.
func (p *Plugin) Healthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healthy
}

// Check asks for a health check now, without waiting for HealthInterval
// (e.g. after a fresh KVM probe). It does nothing when the plugin is not
// running.
func (p *Plugin) Check() {
	p.mu.Lock()
	c := p.checkc
	p.mu.Unlock()
	if c == nil {
		return
	}
	select {
	case c <- struct{}{}:
	default: // a check is already pending
	}
}

// check runs Health and wakes the ListAndWatch streams on a change.
func (p *Plugin) check() {
	h := p.Health()
	p.mu.Lock()
	defer p.mu.Unlock()
	if h != p.healthy {
		klog.InfoS("device plugin health changed", "resource", p.ResourceName, "device", p.DevicePath, "healthy", h)
		p.healthy = h
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

// state is the current health and the channel closed on its next change.
func (p *Plugin) state() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healthy, p.changed
}

// deviceID is the i-th fake device's ID, e.g. "kvm-17".
func (p *Plugin) deviceID(i int) string {
	return p.ResourceName[strings.LastIndex(p.ResourceName, "/")+1:] + "-" + strconv.Itoa(i)
}

// validID reports whether id is one of the plugin's device IDs.
func (p *Plugin) validID(id string) bool {
	prefix := p.deviceID(0)
	prefix = prefix[:len(prefix)-1]
	n, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return false
	}
	i, err := strconv.Atoi(n)
	return err == nil && i >= 0 && i < p.Slots && strconv.Itoa(i) == n
}

func (p *Plugin) devices(healthy bool) []*pluginapi.Device {
	h := pluginapi.Unhealthy
	if healthy {
		h = pluginapi.Healthy
	}
	ds := make([]*pluginapi.Device, p.Slots)
	for i := range ds {
		ds[i] = &pluginapi.Device{ID: p.deviceID(i), Health: h}
	}
	return ds
}

// Run serves and registers the plugin until ctx ends, then stops the server
// and removes its socket. It returns an error only for a bad configuration
// or when the plugin is already running; listen and registration failures
// are logged and retried every WatchInterval.
func (p *Plugin) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.running {
		p.mu.Unlock()
		return fmt.Errorf("deviceplugin %s: already running", p.ResourceName)
	}
	if err := p.defaults(); err != nil {
		p.mu.Unlock()
		return err
	}
	p.running = true
	p.healthy = false
	p.changed = make(chan struct{})
	p.checkc = make(chan struct{}, 1)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.running, p.checkc, p.registered = false, nil, false
		p.mu.Unlock()
	}()

	p.check()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { p.healthLoop(ctx) })

	var (
		srv        *server
		registered fileID // kubelet.sock we registered with; zero = none
	)
	defer func() {
		if srv != nil {
			srv.stop()
		}
	}()
	tick := time.NewTicker(p.WatchInterval)
	defer tick.Stop()
	for {
		if srv != nil && !srv.socketPresent() {
			klog.InfoS("device plugin socket removed, restarting", "resource", p.ResourceName, "socket", srv.path)
			srv.stop()
			srv, registered = nil, fileID{}
		}
		if srv == nil {
			var err error
			if srv, err = p.serve(); err != nil {
				klog.ErrorS(err, "device plugin cannot serve", "resource", p.ResourceName)
			}
		}
		if srv != nil {
			kubelet := statID(filepath.Join(p.Dir, KubeletSocket))
			switch {
			case kubelet.zero():
				registered = fileID{}
			case kubelet != registered && p.Healthy():
				// Only a working device is advertised: a node without usable
				// KVM shows no devices.kemu.dev/kvm at all. One that fails
				// after registering is reported Unhealthy.
				if err := p.register(ctx); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					klog.ErrorS(err, "device plugin registration failed", "resource", p.ResourceName)
				} else {
					klog.InfoS("device plugin registered", "resource", p.ResourceName, "endpoint", p.Socket)
					registered = kubelet
				}
			}
		}
		p.setRegistered(srv != nil && !registered.zero())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Registered reports whether the plugin is serving and registered with the
// kubelet whose socket is present now. A plugin registers only once its
// device is healthy.
func (p *Plugin) Registered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registered
}

func (p *Plugin) setRegistered(r bool) {
	p.mu.Lock()
	p.registered = r
	p.mu.Unlock()
}

func (p *Plugin) healthLoop(ctx context.Context) {
	t := time.NewTicker(p.HealthInterval)
	defer t.Stop()
	p.mu.Lock()
	checkc := p.checkc
	p.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-checkc:
		}
		p.check()
	}
}

// register tells the kubelet about the plugin.
func (p *Plugin) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.Dir, KubeletSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.Socket,
		ResourceName: p.ResourceName,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	return err
}

// fileID tells a file from a recreated one at the same path.
type fileID struct {
	dev, ino uint64
	mtime    int64
}

func (f fileID) zero() bool { return f == fileID{} }

func statID(path string) fileID {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}
	}
	id := fileID{mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	if id.zero() {
		id.mtime = 1
	}
	return id
}

// server is one incarnation of the plugin's gRPC server.
type server struct {
	path string
	id   fileID // the socket as created
	grpc *grpc.Server
	done chan struct{}
}

// serve starts the DevicePlugin service on the plugin's socket, replacing
// a stale one.
func (p *Plugin) serve() (*server, error) {
	path := p.SocketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	s := &server{path: path, id: statID(path), grpc: grpc.NewServer(), done: make(chan struct{})}
	pluginapi.RegisterDevicePluginServer(s.grpc, &service{p: p, done: s.done})
	go func() {
		if err := s.grpc.Serve(l); err != nil {
			klog.ErrorS(err, "device plugin server ended", "resource", p.ResourceName)
		}
	}()
	return s, nil
}

// socketPresent reports whether the socket we created is still there.
func (s *server) socketPresent() bool {
	id := statID(s.path)
	return !id.zero() && id == s.id
}

// stop ends the streams and the server and removes the socket if it is ours.
func (s *server) stop() {
	close(s.done)
	s.grpc.Stop()
	if s.socketPresent() {
		_ = os.Remove(s.path)
	}
}

// service implements the v1beta1 DevicePlugin service for one server.
type service struct {
	pluginapi.UnimplementedDevicePluginServer
	p    *Plugin
	done <-chan struct{}
}

func (s *service) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends all devices with the current health, and again on
// every change, until the kubelet hangs up or the server stops.
func (s *service) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		healthy, changed := s.p.state()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: s.p.devices(healthy)}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		case <-s.done:
			return nil
		}
	}
}

// Allocate gives every container the one host device, whichever and however
// many of the plugin's IDs it got.
func (s *service) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		for _, id := range c.GetDevicesIds() {
			if !s.p.validID(id) {
				return nil, status.Errorf(codes.InvalidArgument, "%s: unknown device %q", s.p.ResourceName, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Devices: []*pluginapi.DeviceSpec{{
				HostPath:      s.p.DevicePath,
				ContainerPath: s.p.ContainerPath,
				Permissions:   s.p.Permissions,
			}},
		})
	}
	return resp, nil
}

// GetPreferredAllocation is not advertised (GetPreferredAllocationAvailable
// is false); should it be called, it prefers the must-include IDs, then the
// first available ones.
func (s *service) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.GetContainerRequests() {
		ids := append([]string(nil), c.GetMustIncludeDeviceIDs()...)
		seen := make(map[string]bool, len(ids))
		for _, id := range ids {
			seen[id] = true
		}
		for _, id := range c.GetAvailableDeviceIDs() {
			if len(ids) >= int(c.GetAllocationSize()) {
				break
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (s *service) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
