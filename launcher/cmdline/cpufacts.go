package cmdline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// CPUFacts are the CPU models and features this node's QEMU offers under
// its accelerator, read over QMP from a QEMU with no machine
// (DetectCPU): query-cpu-definitions and the full expansion of the "max"
// model (everything the accelerator provides: under KVM the host's CPU as
// KVM passes it on, under TCG what TCG emulates).
type CPUFacts struct {
	// Models: name (aliases included) → the model.
	Models map[string]CPUModelFacts
	// Features: each boolean -cpu property of "max" (QEMU's spelling,
	// '-' not '_') → whether the accelerator provides it.
	Features map[string]bool
}

// CPUModelFacts is one of query-cpu-definitions' models.
type CPUModelFacts struct {
	// Unavailable are the model's features the accelerator lacks; a
	// model is usable when there are none.
	Unavailable []string
}

// Bounds on what a (trusted, but large) QEMU answers.
const (
	maxCPUProbeOutput = 4 << 20
	maxCPUModels      = 4096
	maxCPUFeatures    = 4096
	cpuProbeTimeout   = 30 * time.Second
)

// DetectCPU asks binary, started with -machine none under accel, for its
// CPU models and what "max" expands to (one short QEMU run, about 0.2 s).
func DetectCPU(ctx context.Context, binary, accel string) (*CPUFacts, error) {
	if accel != AccelKVM && accel != AccelTCG {
		return nil, fmt.Errorf("CPU probe: accel %q is neither %s nor %s", accel, AccelKVM, AccelTCG)
	}
	ctx, cancel := context.WithTimeout(ctx, cpuProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "-machine", "none,accel="+accel, "-nodefaults", "-no-user-config",
		"-display", "none", "-S", "-qmp", "stdio")
	cmd.Stdin = strings.NewReader(`{"execute":"qmp_capabilities"}
{"execute":"query-cpu-definitions","id":"defs"}
{"execute":"query-cpu-model-expansion","arguments":{"type":"full","model":{"name":"max"}},"id":"max"}
{"execute":"quit"}
`)
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("CPU probe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("CPU probe: %s: %w", binary, err)
	}
	facts, perr := ParseCPUProbe(io.LimitReader(out, maxCPUProbeOutput))
	_, _ = io.Copy(io.Discard, out)
	werr := cmd.Wait()
	if perr != nil {
		return nil, fmt.Errorf("CPU probe: %s under %s: %w (%s)", binary, accel, perr, strings.TrimSpace(stderr.String()))
	}
	if werr != nil {
		return nil, fmt.Errorf("CPU probe: %s under %s: %w (%s)", binary, accel, werr, strings.TrimSpace(stderr.String()))
	}
	return facts, nil
}

// ParseCPUProbe reads DetectCPU's QMP conversation: the answers with id
// "defs" (query-cpu-definitions) and "max" (query-cpu-model-expansion).
func ParseCPUProbe(r io.Reader) (*CPUFacts, error) {
	f := &CPUFacts{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), maxCPUProbeOutput)
	for s.Scan() {
		var msg struct {
			ID     string          `json:"id"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal(s.Bytes(), &msg); err != nil {
			return nil, fmt.Errorf("QMP: %w", err)
		}
		if msg.Error != nil && msg.ID != "" {
			return nil, fmt.Errorf("QMP %s: %s", msg.ID, msg.Error.Desc)
		}
		switch msg.ID {
		case "defs":
			var defs []struct {
				Name        string   `json:"name"`
				Unavailable []string `json:"unavailable-features"`
			}
			if err := json.Unmarshal(msg.Return, &defs); err != nil {
				return nil, fmt.Errorf("query-cpu-definitions: %w", err)
			}
			if len(defs) > maxCPUModels {
				return nil, fmt.Errorf("query-cpu-definitions: %d models, more than %d", len(defs), maxCPUModels)
			}
			f.Models = make(map[string]CPUModelFacts, len(defs))
			for _, d := range defs {
				f.Models[d.Name] = CPUModelFacts{Unavailable: d.Unavailable}
			}
		case "max":
			var exp struct {
				Model struct {
					Props map[string]json.RawMessage `json:"props"`
				} `json:"model"`
			}
			if err := json.Unmarshal(msg.Return, &exp); err != nil {
				return nil, fmt.Errorf("query-cpu-model-expansion: %w", err)
			}
			if len(exp.Model.Props) > maxCPUFeatures {
				return nil, fmt.Errorf("query-cpu-model-expansion: %d properties, more than %d", len(exp.Model.Props), maxCPUFeatures)
			}
			f.Features = make(map[string]bool, len(exp.Model.Props))
			for name, raw := range exp.Model.Props {
				var on bool
				if json.Unmarshal(raw, &on) != nil {
					continue // not a boolean: level, vendor, model-id …
				}
				f.Features[strings.ReplaceAll(name, "_", "-")] = f.Features[strings.ReplaceAll(name, "_", "-")] || on
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("QMP: %w", err)
	}
	if f.Models == nil || f.Features == nil {
		return nil, fmt.Errorf("QMP: no answer to query-cpu-definitions or query-cpu-model-expansion")
	}
	return f, nil
}

// limitedWriter keeps the first n bytes.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// NeedsCPUFacts says whether building the VMI's -cpu needs DetectCPU: a
// named model or cpu.features.
func NeedsCPUFacts(model string, features int) bool {
	switch model {
	case "", v1.CPUModeHostModel, v1.CPUModeHostPassthrough:
		return features > 0
	}
	return true
}
