package launcher

import (
	"bufio"
	"strings"
	"testing"
)

func TestReadControl(t *testing.T) {
	cases := []struct {
		name, in string
		want     controlMessage
		err      string
	}{
		{"waiting", `{"state":"waiting"}` + "\n", controlMessage{State: ControlWaiting}, ""},
		{"failed", `{"state":"failed","message":"QEMU exited"}` + "\n", controlMessage{State: ControlFailed, Message: "QEMU exited"}, ""},
		{"unknown state", `{"state":"done"}` + "\n", controlMessage{}, "unknown control state"},
		{"malformed", "{\n", controlMessage{}, "malformed"},
		{"too long", strings.Repeat(" ", maxControlLine+10) + "\n", controlMessage{}, "longer than"},
		{"no newline", `{"state":"waiting"}`, controlMessage{}, "EOF"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := readControl(bufio.NewReaderSize(strings.NewReader(c.in), maxControlLine))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("readControl = %+v, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("readControl = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestControlState(t *testing.T) {
	cases := []struct {
		d     Domain
		want  string
		final bool
	}{
		{Domain{State: StatePaused, Reason: ReasonMigration}, ControlWaiting, false},
		{Domain{State: StateRunning, Reason: ReasonMigrated}, ControlRunning, true},
		{Domain{State: StateShutoff, Reason: ReasonMigrationFailed}, ControlFailed, true},
	}
	for _, c := range cases {
		m, final := controlState(c.d)
		if m.State != c.want || final != c.final {
			t.Errorf("controlState(%s) = %+v %t, want %s %t", c.d, m, final, c.want, c.final)
		}
	}
}
