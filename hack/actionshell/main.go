// Command actionshell checks the shell steps of a composite GitHub Action
// (action.yml) with shellcheck, which actionlint does for workflows only.
// A step's script may not contain ${{ }} expressions: inputs reach scripts
// through env (an input interpolated into a script is script injection).
//
// Usage: go run ./hack/actionshell [-shellcheck PATH] action.yml...
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"sigs.k8s.io/yaml"
)

type action struct {
	Runs struct {
		Using string `json:"using"`
		Steps []step `json:"steps"`
	} `json:"runs"`
}

type step struct {
	Name  string `json:"name"`
	Shell string `json:"shell"`
	Run   string `json:"run"`
}

func main() {
	shellcheck := flag.String("shellcheck", "shellcheck", "the shellcheck binary")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: actionshell [-shellcheck PATH] action.yml...")
		os.Exit(2)
	}
	failed := false
	for _, file := range flag.Args() {
		problems, err := check(*shellcheck, file)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
			os.Exit(2)
		}
		for _, p := range problems {
			fmt.Println(p)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// check returns one problem per failing step of the composite action in file.
func check(shellcheck, file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var a action
	if err := yaml.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	if a.Runs.Using != "composite" {
		return nil, fmt.Errorf("runs.using is %q, not composite", a.Runs.Using)
	}
	var problems []string
	for i, s := range a.Runs.Steps {
		if s.Run == "" {
			continue
		}
		where := fmt.Sprintf("%s: runs.steps[%d] (%s)", file, i, s.Name)
		if s.Shell != "bash" {
			problems = append(problems, fmt.Sprintf("%s: shell is %q; the checked shell is bash", where, s.Shell))
			continue
		}
		if strings.Contains(s.Run, "${{") {
			problems = append(problems, fmt.Sprintf("%s: ${{ }} in the script; pass the value through env", where))
			continue
		}
		// GitHub runs a bash step as bash --noprofile --norc -eo pipefail.
		cmd := exec.Command(shellcheck, "--shell=bash", "--external-sources", "-")
		cmd.Stdin = strings.NewReader("set -eo pipefail\n" + s.Run)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			if _, ok := err.(*exec.ExitError); !ok {
				return nil, fmt.Errorf("running %s: %w", shellcheck, err)
			}
			problems = append(problems, fmt.Sprintf("%s: shellcheck (line 1 is the added set -eo pipefail):\n%s", where, out.String()))
		}
	}
	return problems, nil
}
