// Command fakelauncher stands in for kemu-launcher in kemuctl's node test
// (ctl/verbs/exec_node_test.go): it serves the launcher's command API on a unix
// socket with canned answers (Info, GetDomain) and a serial console that
// greets and echoes, so that the test needs no QEMU in its image. Built
// statically into the test image next to a static kemuctl.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// ConsoleBanner is what the console sends first.
const ConsoleBanner = "fake serial console ready\r\n"

type fake struct {
	rpc.UnimplementedLauncherServer
	started time.Time
}

func (f *fake) Info(context.Context, *rpc.InfoRequest) (*rpc.InfoResponse, error) {
	return &rpc.InfoResponse{Version: "v1", SupportedVersions: []string{"v1"}, LauncherVersion: "fakelauncher"}, nil
}

func (f *fake) GetDomain(context.Context, *rpc.Empty) (*rpc.DomainResponse, error) {
	return &rpc.DomainResponse{Domain: &rpc.Domain{State: rpc.DomainState_Running, Reason: rpc.DomainReason_Booted, Seq: 1, QemuPid: 4242,
		QemuVersion: "fake", Accelerator: "tcg", StartedUnixNano: f.started.UnixNano(), SinceUnixNano: f.started.UnixNano()}}, nil
}

// Console greets, then echoes every input chunk back as "echo: <chunk>".
// Like the launcher's, it goes on after the client closed its side, until
// the client leaves.
func (f *fake) Console(stream grpc.BidiStreamingServer[rpc.ConsoleInput, rpc.ConsoleOutput]) error {
	if err := stream.Send(&rpc.ConsoleOutput{Data: []byte(ConsoleBanner)}); err != nil {
		return err
	}
	for {
		in, err := stream.Recv()
		if err != nil {
			<-stream.Context().Done()
			return nil
		}
		if err := stream.Send(&rpc.ConsoleOutput{Data: append([]byte("echo: "), in.GetData()...)}); err != nil {
			return err
		}
	}
}

func main() {
	socket := flag.String("socket", "/var/run/kemu/sockets/launcher.sock", "where to serve")
	flag.Parse()
	if err := os.MkdirAll(filepath.Dir(*socket), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = os.Remove(*socket)
	l, err := net.Listen("unix", *socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	rpc.RegisterLauncherServer(srv, &fake{started: time.Now()})
	fmt.Println("serving", *socket)
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
