package local

import (
	"encoding/xml"
	"fmt"
	"os"
	"time"
)

// execCase is one --then exec for the JUnit report.
type execCase struct {
	command        string
	took           time.Duration
	stdout, stderr []byte
	result         string // "exit status N", "killed by signal N"; "" if it ran and exited 0
	err            error  // it could not be run or followed to its end
}

type junitSuite struct {
	XMLName   xml.Name    `xml:"testsuite"`
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
	SystemErr string        `xml:"system-err,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// junitReport renders the exec steps of a run of the VMI ns/name as one
// JUnit testsuite: a testcase per exec named by its command, a failure
// for a non-zero exit, an error for one that could not run. encoding/xml
// escapes what the guest wrote (invalid characters become U+FFFD).
func junitReport(ns, name string, start time.Time, cases []execCase) ([]byte, error) {
	s := junitSuite{Name: "kemuctl run " + ns + "/" + name, Tests: len(cases),
		Timestamp: start.UTC().Format("2006-01-02T15:04:05"), Time: seconds(time.Since(start))}
	for _, c := range cases {
		jc := junitCase{Name: c.command, Classname: ns + "." + name, Time: seconds(c.took),
			SystemOut: string(c.stdout), SystemErr: string(c.stderr)}
		switch {
		case c.err != nil:
			jc.Error = &junitProblem{Message: c.err.Error(), Type: "exec"}
			s.Errors++
		case c.result != "":
			jc.Failure = &junitProblem{Message: c.result, Type: "exit status"}
			s.Failures++
		}
		s.Cases = append(s.Cases, jc)
	}
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(append([]byte(xml.Header), b...), '\n'), nil
}

// writeJUnit writes the report to file.
func writeJUnit(file, ns, name string, start time.Time, cases []execCase) error {
	b, err := junitReport(ns, name, start, cases)
	if err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	if err := os.WriteFile(file, b, 0o666); err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	return nil
}
