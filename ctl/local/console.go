package local

import (
	"fmt"
	"io"

	"github.com/kemu-dev/kemu/launcher"
)

// attachConsole copies the guest's serial output to out and in to the guest.
func attachConsole(l *launcher.Launcher, in io.Reader, out io.Writer) {
	output, input, detach, err := l.Console()
	if err != nil {
		fmt.Fprintln(out, err)
		return
	}
	defer detach()
	go func() { _, _ = io.Copy(input, in) }()
	for b := range output {
		_, _ = out.Write(b)
	}
}
