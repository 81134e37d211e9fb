package main

import (
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadSkipList(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []skipEntry
		err        string
	}{
		{name: "empty", text: "# header only\n"},
		{
			name: "entries with reasons",
			text: "# header\n\n# needs a GPU\n# (none here)\nGPU\n# no AppArmor\nAppArmor.*enforce\n",
			want: []skipEntry{{re: "GPU", reason: "needs a GPU (none here)"}, {re: "AppArmor.*enforce", reason: "no AppArmor"}},
		},
		{name: "entry without reason", text: "# reason\nA\nB\n", err: `entry "B" has no reason`},
		{name: "reason cut by a blank line", text: "# reason\n\nA\n", err: `entry "A" has no reason`},
		{name: "bad regex", text: "# reason\na(b\n", err: "missing closing )"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "skip.txt")
			os.WriteFile(p, []byte(tc.text), 0o644)
			got, err := readSkipList(p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("entry %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestReadReport(t *testing.T) {
	// The shape of ginkgo v2's JSON report, cut down to what is read.
	const report = `[{"SuiteSucceeded": false, "SpecReports": [
	 {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
	 {"ContainerHierarchyTexts": ["[sig-node] Pods"], "LeafNodeText": "should get a host IP [NodeConformance]", "LeafNodeType": "It", "State": "passed"},
	 {"ContainerHierarchyTexts": ["[sig-node] Probing"], "LeafNodeText": "should restart [NodeConformance]", "LeafNodeType": "It", "State": "failed",
	  "RunTime": 3000000000, "Failure": {"Message": "timed out\nmore", "Location": {"FileName": "/x/probe.go", "LineNumber": 7}}},
	 {"ContainerHierarchyTexts": ["[sig-node] GPU"], "LeafNodeText": "works [NodeConformance]", "LeafNodeType": "It", "State": "skipped"},
	 {"ContainerHierarchyTexts": ["[sig-node] Slow"], "LeafNodeText": "waits [Slow] [NodeConformance]", "LeafNodeType": "It", "State": "skipped"},
	 {"ContainerHierarchyTexts": ["[sig-node] Other"], "LeafNodeText": "x", "LeafNodeType": "It", "State": "skipped"},
	 {"ContainerHierarchyTexts": ["[sig-node] Sysctl"], "LeafNodeText": "y [NodeConformance]", "LeafNodeType": "It", "State": "skipped",
	  "Failure": {"Message": "Only supported for node OS distro [gci ubuntu]"}},
	 {"LeafNodeType": "SynchronizedAfterSuite", "State": "failed", "Failure": {"Message": "teardown"}}
	]}]`
	p := filepath.Join(t.TempDir(), "report.json")
	os.WriteFile(p, []byte(report), 0o644)
	res, err := readReport(p, []string{defaultFocus}, []string{defaultSkip}, []skipEntry{{re: "GPU", reason: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed != 1 || res.Failed != 2 || res.Skipped != 1 || res.NotSelected != 3 || res.bySkipList["GPU"] != 1 {
		t.Errorf("passed %d failed %d skipped %d notSelected %d bySkipList %v; want 1 2 1 3 map[GPU:1]",
			res.Passed, res.Failed, res.Skipped, res.NotSelected, res.bySkipList)
	}
	want := "[sig-node] Probing should restart [NodeConformance] [failed] (probe.go:7, 3s): timed out more"
	if len(res.Failures) != 2 || !slices.Contains(res.Failures, want) {
		t.Errorf("failures = %q, want %q among 2", res.Failures, want)
	}
}

func TestProcsRunningAndTerminate(t *testing.T) {
	work := t.TempDir()
	// A process named kubelet whose command line names work, as the
	// suite's kubelet's does (its --kubeconfig is there).
	bin := filepath.Join(work, "kubelet")
	if err := os.Symlink("/bin/sleep", bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	defer cmd.Process.Kill()
	// Asked again for a while: once, on a loaded host (a kind cluster
	// beside it), the first look missed the process just started.
	var got []int
	for i := 0; i < 50; i++ {
		if got = procsRunning("kubelet", work, ""); slices.Equal(got, []int{cmd.Process.Pid}) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Fatalf("procsRunning(kubelet) = %v, want [%d]", got, cmd.Process.Pid)
	}
	if got := procsRunning("kubelet", work, "--run-services-mode"); len(got) != 0 {
		t.Fatalf("procsRunning with an argument it lacks = %v, want none", got)
	}
	if got := procsRunning("kubelet", t.TempDir(), ""); len(got) != 0 {
		t.Fatalf("procsRunning naming another dir = %v, want none", got)
	}
	terminate(slog.New(slog.DiscardHandler), "kubelet", []int{cmd.Process.Pid})
	<-waited
	if alive(cmd.Process.Pid) {
		t.Fatalf("pid %d alive after terminate", cmd.Process.Pid)
	}
}

func TestParseGates(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]bool
		err  bool
	}{
		{in: "", want: map[string]bool{}},
		{in: "PodAndContainerStatsFromCRI=true", want: map[string]bool{"PodAndContainerStatsFromCRI": true}},
		{in: "A=true, B=false,", want: map[string]bool{"A": true, "B": false}},
		{in: "A", err: true},
		{in: "A=yes", err: true},
		{in: "=true", err: true},
	} {
		got, err := parseGates(tc.in)
		if (err != nil) != tc.err {
			t.Fatalf("parseGates(%q): err %v, want error %v", tc.in, err, tc.err)
		}
		if err == nil && !maps.Equal(got, tc.want) {
			t.Errorf("parseGates(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if _, ok := kubeletConfig("10.0.0.0/24", nil)["featureGates"]; ok {
		t.Error("kubeletConfig without gates has featureGates")
	}
	cfg := kubeletConfig("10.0.0.0/24", map[string]bool{"A": true})
	if g, _ := cfg["featureGates"].(map[string]bool); !g["A"] {
		t.Errorf("kubeletConfig featureGates = %v, want A=true", cfg["featureGates"])
	}
}
