package shell

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/ctl/rfb"
)

// screenshotTimeout bounds a screenshot through the launcher.
const screenshotTimeout = 30 * time.Second

// screenshot saves the guest's screen as a PNG: RFB over the launcher's
// Vnc stream (ctl/rfb).
func (s *shell) screenshot(parent context.Context, rest string) error {
	if rest == "" || strings.ContainsAny(rest, " \t") {
		return usagef("usage: screenshot FILE")
	}
	ctx, cancel := context.WithTimeout(parent, screenshotTimeout)
	defer cancel()
	conn, err := rfb.DialLauncher(ctx, s.client)
	if err != nil {
		return err
	}
	defer conn.Close()
	img, err := rfb.Screenshot(ctx, conn)
	var grpcErr interface{ GRPCStatus() *status.Status }
	if errors.As(err, &grpcErr) {
		return grpcErr.GRPCStatus().Err() // the launcher's refusal, as every command prints it
	}
	if err != nil {
		return err
	}
	if err := rfb.SavePNG(rest, img); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "%s: %dx%d\n", rest, img.Bounds().Dx(), img.Bounds().Dy())
	return nil
}
