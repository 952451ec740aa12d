package cmdserver

import (
	"context"
	"os"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPanicBecomesInternal(t *testing.T) {
	_, err := unaryInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
		func(context.Context, any) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal {
		t.Fatalf("unary panic: %v", err)
	}
	err = streamInterceptor(nil, nil, &grpc.StreamServerInfo{FullMethod: "/x/Z"},
		func(any, grpc.ServerStream) error { panic("boom") })
	if status.Code(err) != codes.Internal {
		t.Fatalf("stream panic: %v", err)
	}
}

func TestDiffPaths(t *testing.T) {
	type inner struct {
		A string `json:"a,omitempty"`
		B []int  `json:"b,omitempty"`
	}
	type outer struct {
		X inner `json:"x"`
		Y int   `json:"y,omitempty"`
	}
	got := diffPaths("spec", outer{X: inner{A: "1", B: []int{1}}}, outer{X: inner{A: "2", B: []int{1}}, Y: 3})
	if want := []string{"spec.x.a", "spec.y"}; !reflect.DeepEqual(got, want) {
		t.Errorf("diffPaths = %v, want %v", got, want)
	}
}

func TestThreadCPUTime(t *testing.T) {
	if n := threadCPUTime(os.Getpid(), os.Getpid()); n < 0 {
		t.Errorf("cpu time %d", n)
	}
	if n := threadCPUTime(os.Getpid(), 1<<30); n != 0 {
		t.Errorf("missing thread: %d", n)
	}
}
