package cmdserver

import (
	"context"
	"errors"
	"io"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// MaxVNCStreams bounds the Vnc streams served at once (each is a
// connection to QEMU's VNC server, which encodes the screen for each);
// one more answers ResourceExhausted.
const MaxVNCStreams = 4

// vncStates are the domain states in which Vnc is served: QEMU runs and
// its VNC server listens.
var vncStates = []launcher.State{launcher.StateRunning, launcher.StatePaused, launcher.StateMigrating, launcher.StateShuttingDown}

// vncChunk is the most bytes of QEMU's output sent in one message.
const vncChunk = 32 << 10

// Vnc splices the stream to a fresh connection to QEMU's VNC server: the
// client's bytes in, QEMU's out (RFB, unparsed). It ends when either side
// ends; FailedPrecondition when the VM has no graphics device.
func (s *Server) Vnc(stream grpc.BidiStreamingServer[rpc.StreamData, rpc.StreamData]) error {
	l, err := s.need("vnc", vncStates...)
	if err != nil {
		return err
	}
	if !l.HasGraphics() {
		return status.Error(codes.FailedPrecondition, launcher.ErrNoGraphics.Error())
	}
	select {
	case s.vncSlots <- struct{}{}:
		defer func() { <-s.vncSlots }()
	default:
		return status.Errorf(codes.ResourceExhausted, "vnc: %d VNC streams already open", MaxVNCStreams)
	}
	ctx := stream.Context()
	conn, err := l.DialVNC(ctx)
	if err != nil {
		return toStatus("vnc", l, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	inErr := make(chan error, 1)
	go func() { inErr <- vncIn(stream, conn) }()
	buf := make([]byte, vncChunk)
	for {
		n, rerr := conn.Read(buf)
		if n > 0 {
			if err := stream.Send(&rpc.StreamData{Data: append([]byte(nil), buf[:n]...)}); err != nil {
				return err
			}
		}
		if rerr == nil {
			continue
		}
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		select {
		case err := <-inErr:
			if err != nil {
				return err
			}
		default:
		}
		if errors.Is(rerr, io.EOF) {
			return nil // QEMU closed the connection
		}
		if l.Domain().State == launcher.StateShutoff {
			return status.Error(codes.Unavailable, "vnc: QEMU is gone")
		}
		return status.Errorf(codes.Unavailable, "vnc: reading from QEMU's VNC server: %v", rerr)
	}
}

// vncIn writes the client's bytes to QEMU until the client closes its side
// (then QEMU's side is half-closed and output goes on) or the stream fails
// (then the connection is closed, which ends the output loop).
func vncIn(stream grpc.BidiStreamingServer[rpc.StreamData, rpc.StreamData], conn net.Conn) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if uc, ok := conn.(*net.UnixConn); ok {
					uc.CloseWrite()
				}
				return nil
			}
			conn.Close()
			return err
		}
		if len(msg.GetData()) == 0 {
			continue
		}
		if _, err := conn.Write(msg.GetData()); err != nil {
			conn.Close()
			return status.Errorf(codes.Unavailable, "vnc: writing to QEMU's VNC server: %v", err)
		}
	}
}
