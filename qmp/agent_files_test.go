package qmp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// The guest-file-* helpers send qemu-ga's arguments and check its replies:
// the guest writes them, so a read that returns more than asked, or whose
// count disagrees with its data, is refused.
func TestAgentFiles(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	for _, tc := range []struct {
		name    string
		call    func(a *Agent) (string, error)
		command string
		args    string // the request's arguments, as JSON
		reply   string
		want    string
		wantErr string
	}{{
		name: "open",
		call: func(a *Agent) (string, error) {
			h, err := a.FileOpen(ctxT(t), "/tmp/x", FileWrite)
			return jsonOf(h), err
		},
		command: "guest-file-open", args: `{"mode":"w","path":"/tmp/x"}`,
		reply: `1000`, want: `1000`,
	}, {
		name:    "open refused",
		call:    func(a *Agent) (string, error) { _, err := a.FileOpen(ctxT(t), "/nope/x", FileRead); return "", err },
		command: "guest-file-open", args: `{"mode":"r","path":"/nope/x"}`,
		reply:   `!{"class": "GenericError", "desc": "failed to open file '/nope/x' (mode: 'r'): No such file or directory"}`,
		wantErr: "No such file or directory",
	}, {
		name: "read",
		call: func(a *Agent) (string, error) {
			d, eof, err := a.FileRead(ctxT(t), 1000, 10)
			return jsonOf(map[string]any{"data": string(d), "eof": eof}), err
		},
		command: "guest-file-read", args: `{"count":10,"handle":1000}`,
		reply: `{"count": 5, "buf-b64": "` + b64([]byte("hello")) + `", "eof": true}`,
		want:  `{"data":"hello","eof":true}`,
	}, {
		name:    "read: more than asked",
		call:    func(a *Agent) (string, error) { _, _, err := a.FileRead(ctxT(t), 1000, 3); return "", err },
		command: "guest-file-read", args: `{"count":3,"handle":1000}`,
		reply:   `{"count": 11, "buf-b64": "` + b64([]byte("hello world")) + `", "eof": false}`,
		wantErr: "base64 bytes for a read of 3",
	}, {
		name:    "read: count disagrees",
		call:    func(a *Agent) (string, error) { _, _, err := a.FileRead(ctxT(t), 1000, 10); return "", err },
		command: "guest-file-read", args: `{"count":10,"handle":1000}`,
		reply:   `{"count": 9, "buf-b64": "` + b64([]byte("hello")) + `", "eof": false}`,
		wantErr: "count 9, 5 bytes of data",
	}, {
		name:    "read: not base64",
		call:    func(a *Agent) (string, error) { _, _, err := a.FileRead(ctxT(t), 1000, 10); return "", err },
		command: "guest-file-read", args: `{"count":10,"handle":1000}`,
		reply:   `{"count": 3, "buf-b64": "!!!!", "eof": false}`,
		wantErr: "buf-b64",
	}, {
		name:    "write",
		call:    func(a *Agent) (string, error) { return "", a.FileWrite(ctxT(t), 7, []byte("abc")) },
		command: "guest-file-write", args: `{"buf-b64":"YWJj","handle":7}`,
		reply: `{"count": 3, "eof": false}`,
	}, {
		name:    "write: short",
		call:    func(a *Agent) (string, error) { return "", a.FileWrite(ctxT(t), 7, []byte("abc")) },
		command: "guest-file-write", args: `{"buf-b64":"YWJj","handle":7}`,
		reply:   `{"count": 2, "eof": false}`,
		wantErr: "2 of 3 bytes written",
	}, {
		name: "seek",
		call: func(a *Agent) (string, error) {
			p, err := a.FileSeek(ctxT(t), 7, 0, "cur")
			return jsonOf(p), err
		},
		command: "guest-file-seek", args: `{"handle":7,"offset":0,"whence":"cur"}`,
		reply: `{"position": 42, "eof": false}`, want: `42`,
	}, {
		name:    "close",
		call:    func(a *Agent) (string, error) { return "", a.FileClose(ctxT(t), 7) },
		command: "guest-file-close", args: `{"handle":7}`,
		reply: `{}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFake(t)
			a := NewAgent(c)
			defer a.Close()
			a.needSync = false
			go func() {
				req := f.recv()
				if req.Execute != tc.command || string(req.Arguments) != tc.args {
					t.Errorf("request %s %s, want %s %s", req.Execute, req.Arguments, tc.command, tc.args)
				}
				if e, ok := strings.CutPrefix(tc.reply, "!"); ok {
					f.send(`{"error": ` + e + `, "id": ` + string(req.ID) + "}\n")
					return
				}
				f.reply(req, tc.reply)
			}()
			got, err := tc.call(a)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %s %v, want %s", got, err, tc.want)
			}
		})
	}
}

// Arguments out of bounds are refused before anything is sent.
func TestAgentFileChunkBounds(t *testing.T) {
	c, _ := newFake(t)
	a := NewAgent(c)
	defer a.Close()
	a.needSync = false
	for _, n := range []int{0, -1, MaxFileChunk + 1} {
		if _, _, err := a.FileRead(ctxT(t), 1, n); err == nil {
			t.Errorf("FileRead of %d bytes: no error", n)
		}
	}
	if err := a.FileWrite(ctxT(t), 1, bytes.Repeat([]byte{1}, MaxFileChunk+1)); err == nil {
		t.Error("FileWrite over MaxFileChunk: no error")
	}
	// A full chunk's reply fits an agent line.
	if n := len(`{"return": {"count": 524288, "buf-b64": "", "eof": false}, "id": "kemu-1000000"}`) +
		base64.StdEncoding.EncodedLen(MaxFileChunk); n >= MaxAgentLineSize {
		t.Errorf("a full chunk's reply is %d bytes, over MaxAgentLineSize %d", n, MaxAgentLineSize)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
