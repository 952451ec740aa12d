package main

import (
	"strings"
	"testing"
)

// kemuctl completion SHELL prints cobra's completion script for each shell.
func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{
		"bash":       "__start_kemuctl",
		"zsh":        "#compdef kemuctl",
		"fish":       "complete -c kemuctl",
		"powershell": "Register-ArgumentCompleter -CommandName 'kemuctl'",
	} {
		stdout, stderr, code := run(t, "", "completion", shell)
		if code != 0 || !strings.Contains(stdout, want) || stderr != "" {
			t.Errorf("completion %s: exit %d, stderr %q, script lacks %q", shell, code, stderr, want)
		}
	}
}
