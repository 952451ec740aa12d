package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// kemuctl presents itself as kubectl kemu when installed as the plugin;
// kubectl_complete-kemu is cobra's __complete.
func TestDisplayNameAndPluginArgs(t *testing.T) {
	for _, tc := range []struct {
		argv0, name string
		args, want  []string
	}{
		{"kemuctl", "kemuctl", []string{"version"}, []string{"version"}},
		{"/usr/local/bin/kemuctl", "kemuctl", nil, nil},
		{"/home/u/bin/kubectl-kemu", "kubectl kemu", []string{"pause", "a"}, []string{"pause", "a"}},
		{"kubectl_complete-kemu", "kubectl kemu", []string{"pause", ""}, []string{"__complete", "pause", ""}},
		{"/x/kubectl-kemu-old", "kemuctl", []string{"a"}, []string{"a"}},
	} {
		if got := DisplayName(tc.argv0); got != tc.name {
			t.Errorf("DisplayName(%q) = %q, want %q", tc.argv0, got, tc.name)
		}
		if got := PluginArgs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("PluginArgs(%q, %q) = %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}

// Usage and examples say the name kemuctl presents itself as; the
// connection flags are on every command.
func TestRootAsPlugin(t *testing.T) {
	sub := &cobra.Command{Use: "pause VMI", Short: "Pause", Example: "  kemuctl pause myvmi -n myns",
		RunE: func(*cobra.Command, []string) error { return nil }}
	root := Root(PluginName, NewCluster(), sub)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"pause", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kubectl kemu pause VMI [flags]", "  kubectl kemu pause myvmi -n myns",
		"--kubeconfig string", "-n, --namespace string", "-s, --server string", "--context string", "--token string"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "kemuctl") {
		t.Errorf("help names kemuctl:\n%s", out.String())
	}
}
