package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tests run the real shellcheck (make deps installs it).
func TestCheck(t *testing.T) {
	const head = "runs:\n  using: composite\n  steps:\n"
	tests := []struct {
		name  string
		steps string
		want  []string // substrings, one per expected problem
	}{
		{name: "clean", steps: "    - name: ok\n      shell: bash\n      env:\n        X: ${{ inputs.x }}\n      run: |\n        echo \"$X\"\n    - uses: actions/cache@v4\n"},
		{name: "shellcheck finding", steps: "    - name: unquoted\n      shell: bash\n      run: |\n        rm -rf $DIR/x\n", want: []string{"runs.steps[0] (unquoted): shellcheck", "SC2086"}},
		{name: "expression in script", steps: "    - name: inject\n      shell: bash\n      run: echo ${{ inputs.x }}\n", want: []string{"runs.steps[0] (inject): ${{ }} in the script"}},
		{name: "other shell", steps: "    - name: sh\n      shell: sh\n      run: echo hi\n", want: []string{`shell is "sh"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "action.yml")
			if err := os.WriteFile(file, []byte(head+tt.steps), 0o644); err != nil {
				t.Fatal(err)
			}
			problems, err := check("shellcheck", file)
			if err != nil {
				t.Fatalf("check: %v", err)
			}
			got := strings.Join(problems, "\n")
			if len(tt.want) == 0 && len(problems) != 0 {
				t.Fatalf("problems: %s", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems %q lack %q", got, w)
				}
			}
		})
	}
}

func TestCheckNotComposite(t *testing.T) {
	file := filepath.Join(t.TempDir(), "action.yml")
	if err := os.WriteFile(file, []byte("runs:\n  using: node20\n  main: index.js\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := check("shellcheck", file); err == nil || !strings.Contains(err.Error(), "not composite") {
		t.Fatalf("err = %v, want not composite", err)
	}
}
