package qmp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeQEMU is the far end of a scripted QMP socket: tests read each command
// the client sends and write whatever bytes they like back (greetings,
// events, replies split or out of order, garbage), then close abruptly.
type fakeQEMU struct {
	t    testing.TB
	c    *net.UnixConn
	in   chan fakeRequest
	wmu  sync.Mutex
	once sync.Once
}

type fakeRequest struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
	files     []*os.File
}

const greetingLine = `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18"}, "capabilities": ["oob"]}}` + "\r\n"

// newFake returns a client-side net.Conn and its scripted peer, joined by a
// real unix socket pair (so SCM_RIGHTS works).
func newFake(t testing.TB) (*net.UnixConn, *fakeQEMU) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	toConn := func(fd int, name string) *net.UnixConn {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	client, server := toConn(fds[0], "client"), toConn(fds[1], "qemu")
	f := &fakeQEMU{t: t, c: server, in: make(chan fakeRequest, 1024)}
	go f.readLoop()
	t.Cleanup(func() { f.close(); client.Close() })
	return client, f
}

func (f *fakeQEMU) readLoop() {
	defer close(f.in)
	var files []*os.File // passed with the bytes being read
	r := bufio.NewReader(readerFunc(func(p []byte) (int, error) {
		oob := make([]byte, unix.CmsgSpace(4*8))
		n, oobn, _, _, err := f.c.ReadMsgUnix(p, oob)
		if oobn > 0 {
			files = append(files, parseRights(oob[:oobn])...)
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}))
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var req fakeRequest
		// qemu-ga's resync byte may precede a command.
		if json.Unmarshal(bytes.TrimLeft(line, "\xff"), &req) != nil {
			continue
		}
		req.files, files = files, nil
		f.in <- req
	}
}

func parseRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var out []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			out = append(out, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return out
}

type readerFunc func([]byte) (int, error)

func (r readerFunc) Read(p []byte) (int, error) { return r(p) }

// send writes raw bytes to the client.
func (f *fakeQEMU) send(s string) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if _, err := f.c.Write([]byte(s)); err != nil {
		f.t.Logf("fake QEMU: write: %v", err)
	}
}

// recv returns the next command the client sent.
func (f *fakeQEMU) recv() fakeRequest {
	f.t.Helper()
	select {
	case r, ok := <-f.in:
		if !ok {
			f.t.Fatal("fake QEMU: the client closed the connection")
		}
		return r
	case <-time.After(10 * time.Second):
		f.t.Fatal("fake QEMU: no command from the client in 10 s")
	}
	return fakeRequest{}
}

// reply answers req with a return value.
func (f *fakeQEMU) reply(req fakeRequest, ret string) {
	f.send(`{"return": ` + ret + `, "id": ` + string(req.ID) + "}\r\n")
}

// event sends an event.
func (f *fakeQEMU) event(name, data string) {
	f.send(`{"timestamp": {"seconds": 1700000000, "microseconds": 5}, "event": "` + name + `", "data": ` + data + "}\r\n")
}

// handshake plays QEMU's side of connecting.
func (f *fakeQEMU) handshake() {
	f.send(greetingLine)
	req := f.recv()
	if req.Execute != "qmp_capabilities" {
		f.t.Errorf("first command %q, want qmp_capabilities", req.Execute)
	}
	f.reply(req, "{}")
}

// serve answers every command with handler's return value until the
// client goes away.
func (f *fakeQEMU) serve(handler func(fakeRequest) string) {
	go func() {
		for req := range f.in {
			f.reply(req, handler(req))
		}
	}()
}

func (f *fakeQEMU) close() { f.once.Do(func() { f.c.Close() }) }
