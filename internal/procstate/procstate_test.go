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
