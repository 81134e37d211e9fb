package faults_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
)

// TestStuckFS checks the test's FUSE server: it answers, then after Hang a
// process reading it blocks, sits in D once SIGKILLed, and ends on Abort.
func TestStuckFS(t *testing.T) {
	framework.RequireRoot(t)
	f := mountStuckFS(t, filepath.Join(t.TempDir(), "fuse"))
	if ents, err := os.ReadDir(f.Dir); err != nil || len(ents) != 0 {
		t.Fatalf("readdir of the answering fs: %v, %v", ents, err)
	}
	f.Hang()
	cmd := exec.Command("stat", f.Dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("stat of a hung fs returned: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGKILL)
	var state string
	for range 50 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 {
			state = string(b[i+2])
		}
		if state == "D" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if state != "D" {
		t.Errorf("a SIGKILLed reader of the hung fs is in state %q, want D", state)
	}
	select {
	case <-done:
		t.Fatal("SIGKILL ended a reader of the hung fs")
	case <-time.After(300 * time.Millisecond):
	}
	f.Abort()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader still runs after the connection's abort")
	}
}
