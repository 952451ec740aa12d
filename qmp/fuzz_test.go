package qmp

import (
	"context"
	"errors"
	"testing"
	"time"
)

// FuzzReader feeds arbitrary bytes as QEMU's side of the socket: the client
// must neither panic nor hang. Whatever arrives, a command either gets a
// reply or an error, and once the peer closes, the connection ends.
func FuzzReader(f *testing.F) {
	for _, seed := range []string{
		greetingLine,
		greetingLine + `{"return": {}, "id": "kemu-1"}` + "\n",
		greetingLine + `{"return": {}, "id": "kemu-1"}` + "\n" + `{"event": "STOP", "data": {}, "timestamp": {"seconds": 1, "microseconds": 2}}` + "\n",
		greetingLine + `{"return": {}, "id": "kemu-1"}` + "\n" + `{"return": {"status": "running"}, "id": "kemu-2"}` + "\n",
		greetingLine + `{"error": {"class": "GenericError", "desc": "x"}, "id": "kemu-1"}` + "\n",
		`{"QMP": 5}` + "\n" + `{"return": [], "id": 1}` + "\n",
		"\xff\xff{}\n{\"id\": null}\n",
		`{"event": "", "return": null, "error": null}` + "\n",
		"garbage\n",
		`{"return": {}, "id": {"nested": ["kemu-1"]}}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, fake := newFake(t)
		m := New(c, WithMaxMessageSize(1<<16))
		defer m.Close()
		sub := m.Subscribe(SinceConnect())
		defer sub.Close()
		// Everything QEMU will ever say, then it hangs up: every call must
		// end promptly, with a reply or an error, never by the deadline.
		fake.send(string(data))
		fake.close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.ConnectContext(ctx); err == nil {
			_, err = m.QueryStatus(ctx)
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("a call hung until its deadline")
			}
		} else if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("connect hung until its deadline")
		}
		select {
		case <-m.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("connection did not end after the peer closed")
		}
		for {
			_, err := sub.Next(context.Background())
			var lost *EventsLostError
			if err != nil && !errors.As(err, &lost) {
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("subscription ended with %v", err)
				}
				break
			}
		}
		// Agent framing over the same bytes.
		c2, fake2 := newFake(t)
		a := NewAgent(c2)
		defer a.Close()
		fake2.send(string(data))
		fake2.close()
		if err := a.Ping(ctx); errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("agent call hung until its deadline")
		}
		select {
		case <-a.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("agent connection did not end after the peer closed")
		}
	})
}
