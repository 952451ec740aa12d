package local

import (
	"encoding/xml"
	"errors"
	"strings"
	"testing"
	"time"
)

// The report is valid XML that reads back with the counts, cases and
// output, whatever bytes the guest wrote.
func TestJUnitReport(t *testing.T) {
	cases := []execCase{
		{command: "uname -a", took: 1500 * time.Millisecond, stdout: []byte("Linux testguest\n")},
		{command: "false", took: 20 * time.Millisecond, result: "exit status 1", stderr: []byte("no <good> & \x00\x1b[31m \xff\n")},
		{command: `echo "]]>"`, err: errors.New("not run: the guest agent is not connected")},
	}
	b, err := junitReport("default", "testguest", time.Now().Add(-2*time.Second), cases)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), xml.Header) {
		t.Fatalf("no XML header:\n%s", b)
	}
	var got struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Errors   int    `xml:"errors,attr"`
		Time     string `xml:"time,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Time      string `xml:"time,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
			SystemOut string `xml:"system-out"`
			SystemErr string `xml:"system-err"`
		} `xml:"testcase"`
	}
	if err := xml.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if got.Name != "kemuctl run default/testguest" || got.Tests != 3 || got.Failures != 1 || got.Errors != 1 || got.Time == "" {
		t.Fatalf("suite %+v", got)
	}
	c := got.Cases
	if c[0].Name != "uname -a" || c[0].Classname != "default.testguest" || c[0].Time != "1.500" ||
		c[0].SystemOut != "Linux testguest\n" || c[0].Failure != nil || c[0].Error != nil {
		t.Errorf("case 0 %+v", c[0])
	}
	if c[1].Name != "false" || c[1].Failure == nil || c[1].Failure.Message != "exit status 1" ||
		!strings.HasPrefix(c[1].SystemErr, "no <good> & ") {
		t.Errorf("case 1 %+v", c[1])
	}
	if c[2].Name != `echo "]]>"` || c[2].Error == nil || !strings.Contains(c[2].Error.Message, "not run") {
		t.Errorf("case 2 %+v", c[2])
	}
}
