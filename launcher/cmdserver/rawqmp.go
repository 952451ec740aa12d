package cmdserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/qmp"
)

// readOnlyQMP are the commands besides query-* that the Qmp RPC passes
// without launcherpod.FlagAllowRawQMP: they only list QEMU's object model. Left out on
// purpose: qom-get (object properties may hold secrets), device-list-
// properties and qom-list-properties (they instantiate objects), and
// human-monitor-command (HMP can do anything).
var readOnlyQMP = []string{"qom-list", "qom-list-types"}

// ReadOnlyQMP says whether the Qmp RPC passes cmd without launcherpod.FlagAllowRawQMP:
// QEMU's query-* commands and readOnlyQMP.
func ReadOnlyQMP(cmd string) bool {
	return strings.HasPrefix(cmd, "query-") || slices.Contains(readOnlyQMP, cmd)
}

// rawQMPMembers are the members a command may have without launcherpod.FlagAllowRawQMP
// (exec-oob, control or anything else QEMU might grow are refused).
var rawQMPMembers = []string{"execute", "arguments", "id"}

// CheckRawQMP parses one raw QMP command (a JSON object with "execute") and
// decides whether the Qmp RPC may pass it: any command with allowRaw, else
// only ReadOnlyQMP ones. Errors are InvalidArgument (not a command) or
// PermissionDenied naming the command and launcherpod.FlagAllowRawQMP.
func CheckRawQMP(commandJSON string, allowRaw bool) (name string, err error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(commandJSON), &obj); err != nil {
		return "", status.Errorf(codes.InvalidArgument, "command_json is not a JSON object: %v", err)
	}
	raw, ok := obj["execute"]
	if !ok {
		return "", status.Error(codes.InvalidArgument, `command_json has no "execute" member`)
	}
	if err := json.Unmarshal(raw, &name); err != nil || name == "" {
		return "", status.Error(codes.InvalidArgument, `command_json: "execute" is not a command name`)
	}
	if allowRaw {
		return name, nil
	}
	for k := range obj {
		if !slices.Contains(rawQMPMembers, k) {
			return name, status.Errorf(codes.PermissionDenied, "%q with member %q: without --%s the launcher passes only the members %s",
				name, k, launcherpod.FlagAllowRawQMP, strings.Join(rawQMPMembers, ", "))
		}
	}
	if !ReadOnlyQMP(name) {
		return name, status.Errorf(codes.PermissionDenied,
			"%q is not a read-only command: without --%s the launcher passes only query-*, %s; change the VM with the launcher's own RPCs (Pause, Reset, Shutdown, ...)",
			name, launcherpod.FlagAllowRawQMP, strings.Join(readOnlyQMP, ", "))
	}
	return name, nil
}

// RemoveDebugQMP is a launcher pre-start hook (QEMU started, paused) for a
// launcher without launcherpod.FlagAllowRawQMP: it unlinks QEMU's second QMP socket at
// path, so that nothing (a process in the launcher's container, the host)
// can connect to it and bypass the Qmp RPC's allowlist, and makes sure no
// client got connected before: QEMU's query-chardev names the socket
// "disconnected:..." while nobody is.
func RemoveDebugQMP(ctx context.Context, m *qmp.Monitor, path string) error {
	if path == "" {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the debug QMP socket: %w", err)
	}
	var chardevs []struct {
		Label    string `json:"label"`
		Filename string `json:"filename"`
	}
	if err := m.Execute(ctx, "query-chardev", nil, &chardevs); err != nil {
		return fmt.Errorf("checking the debug QMP socket: %w", err)
	}
	for _, c := range chardevs {
		if c.Label == cmdline.ChardevQMPDebug && !strings.HasPrefix(c.Filename, "disconnected:") {
			return fmt.Errorf("a client connected to the debug QMP socket %s before it was removed (%s)", path, c.Filename)
		}
	}
	return nil
}
