package cmdserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/qmp"
)

// WatchDomain streams domain changes (and QMP events if asked). Before the
// first Sync it waits for the VM.
func (s *Server) WatchDomain(req *rpc.WatchRequest, stream grpc.ServerStreamingServer[rpc.WatchEvent]) error {
	ctx := stream.Context()
	select {
	case <-s.started:
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	l := s.Launcher()
	w := l.Watch(true)
	from := int(req.GetFromSeq())
	if from <= 0 {
		// The current state, then every change after it.
		from = l.Domain().Seq
	}

	events := make(chan *rpc.WatchEvent, 64)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if req.GetQmpEvents() {
		if m := l.Monitor(); m != nil && l.Domain().State != launcher.StateShutoff {
			sub := m.Subscribe(qmp.WithBuffer(1024))
			defer sub.Close()
			go func() {
				for {
					ev, err := sub.Next(wctx)
					if err != nil {
						return
					}
					e := &rpc.QmpEvent{Name: ev.Name, TimestampUnixNano: unixNano(ev.Timestamp)}
					if ev.Data != nil {
						b, _ := json.Marshal(ev.Data)
						e.DataJson = string(b)
					}
					select {
					case events <- &rpc.WatchEvent{Event: &rpc.WatchEvent_QmpEvent{QmpEvent: e}}:
					case <-wctx.Done():
						return
					}
				}
			}()
		}
	}
	go func() {
		for {
			d, err := w.Next(wctx)
			if err != nil {
				return
			}
			if d.Seq < from {
				continue
			}
			select {
			case events <- &rpc.WatchEvent{Event: &rpc.WatchEvent_Domain{Domain: s.domainOf(d)}}:
			case <-wctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case ev := <-events:
			if err := stream.Send(ev); err != nil {
				return err
			}
			if d := ev.GetDomain(); d != nil && d.State == launcher.StateShutoff {
				return nil
			}
		}
	}
}

// Console is the serial console: the guest's output from now on out, the
// client's input in.
func (s *Server) Console(stream grpc.BidiStreamingServer[rpc.ConsoleInput, rpc.ConsoleOutput]) error {
	l, err := s.need("console")
	if err != nil {
		return err
	}
	out, in, detach, err := l.Console()
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	defer detach()
	ctx := stream.Context()
	inErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil // the client closed its side; output goes on
				}
				inErr <- err
				return
			}
			if len(msg.GetData()) == 0 {
				continue
			}
			if _, err := in.Write(msg.GetData()); err != nil {
				inErr <- status.Errorf(codes.Unavailable, "console input: %v", err)
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case err := <-inErr:
			if err != nil {
				return err
			}
			inErr = nil
		case b, ok := <-out:
			if !ok {
				return status.Error(codes.Unavailable, "console: QEMU is gone")
			}
			if err := stream.Send(&rpc.ConsoleOutput{Data: b}); err != nil {
				return err
			}
		}
	}
}
