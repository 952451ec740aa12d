package nodeapi

import (
	"testing"
)

// One stream per VMI and verb: acquiring a taken slot stops the older
// stream and waits for it to let go; other VMIs and verbs are untouched;
// after wait nothing is acquired.
func TestStreamSlots(t *testing.T) {
	s := streamSlots{slots: map[slotKey]*slot{}}
	k := slotKey{uid: "a", verb: "console"}
	stopped := make(chan struct{})
	releaseFirst, ok := s.acquire(k, func() { close(stopped) })
	if !ok {
		t.Fatal("first acquire refused")
	}
	releaseVNC, ok := s.acquire(slotKey{uid: "a", verb: "vnc"}, func() { t.Error("the VNC stream was stopped") })
	if !ok {
		t.Fatal("vnc refused")
	}
	go func() { <-stopped; releaseFirst() }()
	releaseSecond, ok := s.acquire(k, func() {})
	if !ok {
		t.Fatal("second acquire refused")
	}
	select {
	case <-stopped:
	default:
		t.Error("the older stream was not stopped")
	}
	releaseSecond()
	releaseVNC()
	s.wait()
	if _, ok := s.acquire(k, func() {}); ok {
		t.Error("acquired after wait")
	}
}
