package expectations

import (
	"testing"
	"time"
)

func TestExpectations(t *testing.T) {
	now := time.Unix(1000, 0)
	e := New(time.Minute)
	e.now = func() time.Time { return now }

	if !e.Satisfied("a") {
		t.Fatal("unknown key must be satisfied")
	}
	e.ExpectCreations("a", 1)
	if e.Satisfied("a") {
		t.Fatal("pending creation must block")
	}
	if add, del := e.Pending("a"); add != 1 || del != 0 {
		t.Fatalf("Pending = %d, %d", add, del)
	}
	e.CreationObserved("a")
	if !e.Satisfied("a") {
		t.Fatal("observed creation must satisfy")
	}
	e.CreationObserved("a") // a late duplicate observation stays satisfied
	if !e.Satisfied("a") {
		t.Fatal("over-observed must stay satisfied")
	}

	e.ExpectDeletions("b", 1)
	if e.Satisfied("b") {
		t.Fatal("pending deletion must block")
	}
	now = now.Add(2 * time.Minute)
	if !e.Satisfied("b") {
		t.Fatal("expired expectations must satisfy")
	}
	e.Delete("b")
	if add, del := e.Pending("b"); add != 0 || del != 0 {
		t.Fatal("deleted key must have nothing pending")
	}
	e.CreationObserved("unknown") // no panic, no entry
	if !e.Satisfied("unknown") {
		t.Fatal("observing an unknown key must not create expectations")
	}
}
