package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A probe's timeout may reach the client as the launcher ending the stream
// (its copy of the deadline fired first) before the client's own timer.
func TestTimedOut(t *testing.T) {
	live, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	<-expired.Done()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"own deadline passed", expired, errors.New("anything"), true},
		{"launcher ended the stream at the deadline", live, status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL"), true},
		{"deadline exceeded reported", live, status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{"launcher refused", live, status.Error(codes.FailedPrecondition, "no guest agent"), false},
		{"launcher gone", live, status.Error(codes.Unavailable, "connection refused"), false},
	} {
		if got := timedOut(c.ctx, c.err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
