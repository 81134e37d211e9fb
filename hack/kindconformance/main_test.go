package main

import (
	"strings"
	"testing"
)

func TestParseSkipList(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      bool
	}{
		{name: "entries and comments", in: "# head\n\nA b # reason one\n  C\\[x\\] # reason two \n", want: []string{"A b", `C\[x\]`}},
		{name: "no reason", in: "A b\n", err: true},
		{name: "empty reason", in: "A b #  \n", err: true},
		{name: "empty", in: "# only\n", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSkipList(strings.NewReader(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCount(t *testing.T) {
	report := `[{"SpecReports":[
	 {"LeafNodeType":"It","LeafNodeText":"a","ContainerHierarchyTexts":["[sig-node] Pods"],"State":"passed"},
	 {"LeafNodeType":"It","LeafNodeText":"b","State":"failed","Failure":{"Message":"Expected\n  1\nto equal 2","Location":{"FileName":"/x/pods.go","LineNumber":7}}},
	 {"LeafNodeType":"It","LeafNodeText":"c","State":"skipped","Failure":{"Message":"Only supported for providers [gce]"}},
	 {"LeafNodeType":"It","LeafNodeText":"d","State":"skipped"},
	 {"LeafNodeType":"It","LeafNodeText":"e","State":"timedout"},
	 {"LeafNodeType":"SynchronizedBeforeSuite","State":"passed"},
	 {"LeafNodeType":"ReportAfterSuite","State":"failed","Failure":{"Message":"boom"}}
	]}]`
	c, err := count([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if c.passed != 1 || c.failed != 3 || c.skipped != 1 || c.notSelected != 1 {
		t.Fatalf("passed %d failed %d skipped %d not selected %d, want 1 3 1 1", c.passed, c.failed, c.skipped, c.notSelected)
	}
	var b strings.Builder
	c.print(&b)
	for _, want := range []string{"[FAILED] b [failed] (pods.go:7, 0s): Expected 1 to equal 2", "[SKIPPED] c: Only supported", "1 passed, 3 failed, 1 skipped (1 not selected)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := count([]byte(`[]`)); err == nil {
		t.Error("an empty report counted")
	}
	if _, err := count([]byte(`{`)); err == nil {
		t.Error("a broken report counted")
	}
}
