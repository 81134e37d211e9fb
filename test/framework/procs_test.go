package framework

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestKillProcessesUnder(t *testing.T) {
	dir := t.TempDir()
	// A "monitor" naming dir on its command line, with a child that does not.
	parent := exec.Command("sh", "-c", "sleep 300 & wait", "monitor", dir+"/monitors/x.sock")
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { parent.Wait(); close(done) }()
	bystander := exec.Command("sleep", "300")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	defer bystander.Process.Kill()

	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); {
		for _, p := range listProcs() {
			if p.ppid == parent.Process.Pid {
				child = p.pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if child == 0 {
		t.Fatal("the monitor's child did not start")
	}

	killed := killProcessesUnder(dir)
	if len(killed) == 0 || !strings.Contains(killed[0], "monitor") {
		t.Errorf("killed %v, want the monitor first", killed)
	}
	<-done
	if Running(child) {
		t.Errorf("child %d still runs", child)
	}
	if syscall.Kill(bystander.Process.Pid, 0) != nil {
		t.Error("a process unrelated to dir was killed")
	}
}
