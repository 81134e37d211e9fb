package procstate

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	sleep := exec.Command("sleep", "100")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleep.Wait()
	defer sleep.Process.Kill()
	tests := []struct {
		name string
		pid  int
		want string
	}{
		{"child", sleep.Process.Pid, "(sleep) "},
		{"this process", os.Getpid(), "(procstate.test)"},
		{"no such process", 1 << 30, "(gone)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Describe(tt.pid); !strings.Contains(got, tt.want) {
				t.Errorf("Describe(%d) = %q, want it to hold %q", tt.pid, got, tt.want)
			}
		})
	}
	if got := DescribeAll([]int{1 << 30, 1<<30 + 1, 1<<30 + 2}, 2); !strings.HasSuffix(got, "and 1 more") {
		t.Errorf("DescribeAll: %q", got)
	}
	found := false
	for _, p := range SamePIDNamespace(os.Getpid()) {
		found = found || p == sleep.Process.Pid
	}
	if !found {
		t.Errorf("SamePIDNamespace does not list a child in the same namespace")
	}
}

func TestParseStartTime(t *testing.T) {
	stat := "1234 (we) ird (name)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10"
	got, err := ParseStartTime([]byte(stat))
	if err != nil || got != 987654 {
		t.Fatalf("= %d, %v; want 987654", got, err)
	}
	if _, err := ParseStartTime([]byte("1 (x) S 1")); err == nil {
		t.Fatal("short stat accepted")
	}
	if StartTime(os.Getpid()) == 0 {
		t.Error("no start time for this process")
	}
	if StartTime(1<<30) != 0 {
		t.Error("a start time for a pid that does not exist")
	}
}
