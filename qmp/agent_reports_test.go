package qmp

import (
	"errors"
	"strings"
	"testing"
)

// guest-get-users and guest-get-fsinfo: qemu-ga 7.2's reply shapes
// decoded, optional fields absent, and an agent error returned as a
// *qmp.Error naming the command.
func TestAgentReports(t *testing.T) {
	u64 := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name    string
		cmd     string
		reply   string // the JSON after "return" or "error"
		call    func(a *Agent) (any, error)
		check   func(t *testing.T, v any)
		wantErr string // the agent error's class
	}{
		{
			name:  "users",
			cmd:   "guest-get-users",
			reply: `"return": [{"user": "root", "login-time": 1700000000.25}, {"user": "Administrator", "domain": "WIN", "login-time": 1.5}]`,
			call:  func(a *Agent) (any, error) { return a.Users(ctxT(t)) },
			check: func(t *testing.T, v any) {
				u := v.([]GuestUser)
				if len(u) != 2 || u[0].User != "root" || u[0].LoginTime != 1700000000.25 || u[1].Domain != "WIN" {
					t.Errorf("users %+v", u)
				}
			},
		},
		{
			name:  "no users",
			cmd:   "guest-get-users",
			reply: `"return": []`,
			call:  func(a *Agent) (any, error) { return a.Users(ctxT(t)) },
			check: func(t *testing.T, v any) {
				if u := v.([]GuestUser); len(u) != 0 {
					t.Errorf("users %+v", u)
				}
			},
		},
		{
			name: "fsinfo",
			cmd:  "guest-get-fsinfo",
			reply: `"return": [{"name": "vda1", "mountpoint": "/", "type": "ext4", "used-bytes": 1024, "total-bytes": 4096,
				"disk": [{"pci-controller": {"domain": 0, "bus": 0, "slot": 4, "function": 0}, "bus-type": "virtio", "bus": 0,
				"target": 0, "unit": 0, "serial": "ROOT1", "dev": "/dev/vda1"}]},
				{"name": "tmpfs", "mountpoint": "/run", "type": "tmpfs", "disk": []}]`,
			call: func(a *Agent) (any, error) { return a.Filesystems(ctxT(t)) },
			check: func(t *testing.T, v any) {
				f := v.([]GuestFilesystemInfo)
				if len(f) != 2 {
					t.Fatalf("filesystems %+v", f)
				}
				want := GuestFilesystemInfo{Name: "vda1", Mountpoint: "/", Type: "ext4", UsedBytes: u64(1024), TotalBytes: u64(4096)}
				if g := f[0]; g.Name != want.Name || g.Mountpoint != want.Mountpoint || g.Type != want.Type ||
					*g.UsedBytes != 1024 || *g.TotalBytes != 4096 || len(g.Disks) != 1 ||
					g.Disks[0].Serial != "ROOT1" || g.Disks[0].BusType != "virtio" || g.Disks[0].Dev != "/dev/vda1" {
					t.Errorf("filesystem %+v", g)
				}
				if f[1].UsedBytes != nil || f[1].TotalBytes != nil || len(f[1].Disks) != 0 {
					t.Errorf("tmpfs %+v", f[1])
				}
			},
		},
		{
			name:    "fsinfo refused",
			cmd:     "guest-get-fsinfo",
			reply:   `"error": {"class": "GenericError", "desc": "Command guest-get-fsinfo has been disabled"}`,
			call:    func(a *Agent) (any, error) { return a.Filesystems(ctxT(t)) },
			wantErr: "GenericError",
		},
		{
			name:    "users not a list",
			cmd:     "guest-get-users",
			reply:   `"return": {"user": "root"}`,
			call:    func(a *Agent) (any, error) { return a.Users(ctxT(t)) },
			wantErr: "decoding",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFake(t)
			a := NewAgent(c)
			defer a.Close()
			a.needSync = false
			go func() {
				req := f.recv()
				if req.Execute != tc.cmd {
					t.Errorf("command %q, want %q", req.Execute, tc.cmd)
				}
				// One line, as qemu-ga answers.
				f.send("{" + strings.ReplaceAll(tc.reply, "\n", " ") + `, "id": ` + string(req.ID) + "}\n")
			}()
			v, err := tc.call(a)
			if tc.wantErr != "" {
				var qe *Error
				switch {
				case err == nil:
					t.Fatalf("no error; got %+v", v)
				case tc.wantErr == "decoding":
					if errors.As(err, &qe) {
						t.Fatalf("a bad reply is not an agent error: %v", err)
					}
				case !errors.As(err, &qe) || qe.Class != tc.wantErr:
					t.Fatalf("error %v, want agent error %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, v)
		})
	}
}
