package local

import (
	"fmt"
	"path"
	"strings"
)

// thenValue is --then: actions separated by commas, repeatable. An
// action with an argument that is a command or paths (exec=, copy-in=,
// copy-out=) takes the rest of the argument, commas included, and no
// quoting applies: --then 'exec=printf "a,b\n"' is one action.
type thenValue struct{ actions *[]string }

// restActions are the actions whose value runs to the end of the argument.
var restActions = []string{"exec=", "copy-in=", "copy-out="}

func (v thenValue) Set(s string) error {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		for _, r := range restActions {
			if strings.HasPrefix(p, r) {
				*v.actions = append(*v.actions, strings.Join(parts[i:], ","))
				return nil
			}
		}
		*v.actions = append(*v.actions, p)
	}
	return nil
}

func (v thenValue) String() string { return strings.Join(*v.actions, ",") }

func (v thenValue) Type() string { return "actions" }

// copyPaths splits copy-in's and copy-out's HOST:GUEST at the first colon:
// the host path comes first in both (copy-in copies it to the guest path,
// copy-out from the guest path to it). The guest path must be absolute.
func copyPaths(action, val string) (host, guest string, err error) {
	host, guest, ok := strings.Cut(val, ":")
	if !ok || host == "" || guest == "" {
		return "", "", fmt.Errorf("--then %s=%s: want %s=HOST-PATH:GUEST-PATH", action, val, action)
	}
	if !path.IsAbs(guest) {
		return "", "", fmt.Errorf("--then %s=%s: the guest path %q is not absolute", action, val, guest)
	}
	return host, guest, nil
}
