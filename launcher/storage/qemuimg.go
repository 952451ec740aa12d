package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// qemuImg runs qemu-img.
type qemuImg struct{ bin string }

func (q qemuImg) run(ctx context.Context, args ...string) ([]byte, error) {
	bin := q.bin
	if bin == "" {
		bin = "qemu-img"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if msg != "" {
			return nil, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, msg)
		}
		return nil, fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	return stdout.Bytes(), nil
}

// imageInfo is the part of `qemu-img info --output=json` kemu uses.
type imageInfo struct {
	Filename        string `json:"filename"`
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	BackingFilename string `json:"backing-filename"`
	FormatSpecific  struct {
		Type string `json:"type"`
		Data struct {
			DataFile string `json:"data-file"`
		} `json:"data"`
	} `json:"format-specific"`
}

// info probes a disk image's format (never trusting its name).
func (q qemuImg) info(ctx context.Context, path string) (*imageInfo, error) {
	out, err := q.run(ctx, "info", "--output=json", path)
	if err != nil {
		return nil, err
	}
	var info imageInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	return &info, nil
}

// checkBase refuses what cannot safely be a containerDisk: formats other
// than raw and qcow2, and images referring to other files (a backing file or
// an external data file would let an image read host files).
func (info *imageInfo) checkBase() error {
	switch info.Format {
	case FormatRaw, FormatQCOW2:
	default:
		return fmt.Errorf("format %q is not supported (raw or qcow2)", info.Format)
	}
	if info.BackingFilename != "" {
		return fmt.Errorf("has a backing file (%s): a containerDisk must be self-contained", info.BackingFilename)
	}
	if info.FormatSpecific.Data.DataFile != "" {
		return fmt.Errorf("has an external data file (%s): a containerDisk must be self-contained", info.FormatSpecific.Data.DataFile)
	}
	if info.VirtualSize <= 0 {
		return errors.New("has no size")
	}
	return nil
}
