package main

import (
	"os"
	"path/filepath"
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

func TestReadReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	report := write("report.json", `[{"SpecReports":[
	 {"LeafNodeType":"It","LeafNodeText":"a","ContainerHierarchyTexts":["[sig-node] Pods"],"State":"passed"},
	 {"LeafNodeType":"It","LeafNodeText":"b","State":"failed","Failure":{"Message":"Expected\n  1\nto equal 2","Location":{"FileName":"/x/pods.go","LineNumber":7}}},
	 {"LeafNodeType":"It","LeafNodeText":"c","State":"skipped","Failure":{"Message":"Only supported for providers [gce]"}},
	 {"LeafNodeType":"It","LeafNodeText":"d","State":"skipped"},
	 {"LeafNodeType":"It","LeafNodeText":"e","State":"timedout"},
	 {"LeafNodeType":"SynchronizedBeforeSuite","State":"passed"},
	 {"LeafNodeType":"ReportAfterSuite","State":"failed","Failure":{"Message":"boom"}}
	]}]`)
	s, err := readReport(report)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printSummary(&b, s)
	for _, want := range []string{
		"  [SKIPPED] c: Only supported for providers [gce]\n",
		"  [FAILED] ReportAfterSuite [failed]: boom\n",
		"  [FAILED] b [failed] (pods.go:7, 0s): Expected 1 to equal 2\n",
		"1 passed, 3 failed, 1 skipped (1 not selected)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	for _, tc := range []struct{ name, path, want string }{
		{"no suite", write("empty.json", `[]`), "no suite in the report"},
		{"broken", write("broken.json", `{`), "broken.json"},
		{"missing", filepath.Join(dir, "none.json"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := readReport(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}
