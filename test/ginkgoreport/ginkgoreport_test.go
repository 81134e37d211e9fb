package ginkgoreport

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	// Spec reports in the shape of ginkgo v2's JSON report, cut down to
	// what is read.
	const (
		passed   = `{"ContainerHierarchyTexts": ["[sig-node] Pods"], "LeafNodeText": "should get a host IP", "LeafNodeType": "It", "State": "passed"}`
		failed   = `{"ContainerHierarchyTexts": ["[sig-node] Probing"], "LeafNodeText": "should restart", "LeafNodeType": "It", "State": "failed", "RunTime": 3000000000, "Failure": {"Message": "timed out\nmore", "Location": {"FileName": "/x/probe.go", "LineNumber": 7}}}`
		notSel   = `{"ContainerHierarchyTexts": ["[sig-node] GPU"], "LeafNodeText": "works", "LeafNodeType": "It", "State": "skipped"}`
		selfSkip = `{"ContainerHierarchyTexts": ["[sig-node] Sysctl"], "LeafNodeText": "y", "LeafNodeType": "It", "State": "skipped", "Failure": {"Message": "Only supported for node OS distro [gci ubuntu]"}}`
		pending  = `{"LeafNodeText": "later", "LeafNodeType": "It", "State": "pending"}`
		before   = `{"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"}`
		after    = `{"LeafNodeType": "SynchronizedAfterSuite", "State": "failed", "Failure": {"Message": "teardown"}}`
	)
	for _, tc := range []struct {
		name                               string
		specs                              []string
		passed, failed, skipped, notSelCnt int
		failures, skips, passedNames       []string
	}{
		{name: "empty"},
		{
			name: "each outcome", specs: []string{before, passed, failed, notSel, selfSkip, pending, after},
			passed: 1, failed: 2, skipped: 2, notSelCnt: 1,
			failures: []string{
				"SynchronizedAfterSuite [failed]: teardown",
				"[sig-node] Probing should restart [failed] (probe.go:7, 3s): timed out more",
			},
			skips:       []string{"[sig-node] Sysctl y: Only supported for node OS distro [gci ubuntu]", "later: "},
			passedNames: []string{"[sig-node] Pods should get a host IP"},
		},
		{name: "a suite node that passed is no spec", specs: []string{before}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "report.json")
			text := `[{"SuiteSucceeded": false, "SpecReports": [` + strings.Join(tc.specs, ",") + `]}]`
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Read(p)
			if err != nil {
				t.Fatal(err)
			}
			if s.Suites != 1 {
				t.Errorf("suites = %d, want 1", s.Suites)
			}
			if s.Passed != tc.passed || s.Failed != tc.failed || s.Skipped != tc.skipped || s.NotSelected != tc.notSelCnt {
				t.Errorf("passed %d failed %d skipped %d not selected %d; want %d %d %d %d",
					s.Passed, s.Failed, s.Skipped, s.NotSelected, tc.passed, tc.failed, tc.skipped, tc.notSelCnt)
			}
			if !slices.Equal(s.Failures, tc.failures) || !slices.Equal(s.Skips, tc.skips) || !slices.Equal(s.PassedNames, tc.passedNames) {
				t.Errorf("failures %q skips %q passed %q; want %q %q %q", s.Failures, s.Skips, s.PassedNames, tc.failures, tc.skips, tc.passedNames)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "none.json"), "no such file"},
		{"not JSON", bad, bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Read(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestParseNoSuite(t *testing.T) {
	s, err := Parse([]byte("[]"))
	if err != nil || s.Suites != 0 || s.Passed+s.Failed+s.Skipped+s.NotSelected != 0 {
		t.Errorf("Parse([]) = %+v, %v; want no suite and no spec", s, err)
	}
}

func TestOneLine(t *testing.T) {
	long := strings.Repeat("x", 310)
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"Expected\n    <int>: 1\nto equal\n    <int>: 2", "Expected <int>: 1 to equal <int>: 2"},
		{long, long[:300] + "..."},
	} {
		if got := OneLine(tc.in); got != tc.want {
			t.Errorf("OneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
