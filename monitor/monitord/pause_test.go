package monitord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-runtime/berth/monitor"
)

// TestRunPause starts the built-in pause through the monitor: it is the
// monitor's child, in its own UTS namespace with the hostname applied,
// addressed by the pod's id, and its exit is recorded.
func TestRunPause(t *testing.T) {
	e := start(t)
	pauseBin := filepath.Join(t.TempDir(), "berth-pause")
	if out, err := exec.Command("go", "build", "-o", pauseBin, "github.com/berth-runtime/berth/cmd/berth-pause").CombinedOutput(); err != nil {
		t.Fatalf("build berth-pause: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ping, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpPing})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	spec, _ := json.Marshal(map[string]string{"hostname": "paused"})
	resp, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpRunPause, ID: "pod1", Pause: &monitor.PauseRequest{
		Args: []string{pauseBin}, Env: []string{"BERTH_PAUSE_SPEC=" + string(spec)},
		NewUTS: true, NewIPC: true, NewPID: true, Dir: dir,
	}})
	if err != nil {
		t.Fatal(err)
	}
	pid := resp.Pid
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if ppid := statusField(t, pid, "PPid"); ppid != fmt.Sprint(ping.Pid) {
		t.Errorf("pause's parent is %s, want the monitor %d", ppid, ping.Pid)
	}
	if out, err := exec.Command("nsenter", "-t", fmt.Sprint(pid), "-u", "hostname").Output(); err != nil || strings.TrimSpace(string(out)) != "paused" {
		t.Errorf("hostname in pause's UTS namespace = %q, %v", out, err)
	}
	if st, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpStatus, ID: "pod1"}); err != nil || st.State != monitor.StateRunning || st.Pid != pid {
		t.Fatalf("status = %+v, %v", st, err)
	}
	if _, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpShutdown}); err == nil {
		t.Fatal("shutdown accepted while pause runs")
	}
	if _, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpSignal, ID: "pod1", Signal: int(syscall.SIGTERM)}); err != nil {
		t.Fatal(err)
	}
	w, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpWait, ID: "pod1"})
	if err != nil || w.Exit == nil || w.Exit.Code != 0 {
		t.Fatalf("wait = %+v, %v", w, err)
	}
	if ex, err := monitor.ReadExit(dir); err != nil || ex == nil || ex.Code != 0 {
		t.Fatalf("exit file = %+v, %v", ex, err)
	}
	if _, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpSignal, ID: "pod1", Signal: 9}); !monitor.IsCode(err, monitor.CodeNotRunning) {
		t.Errorf("signal after exit = %v, want not-running", err)
	}
	if _, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpShutdown}); err != nil {
		t.Fatalf("shutdown after pause exited: %v", err)
	}
}

func TestRunPauseFailure(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpRunPause, ID: "pod1", Pause: &monitor.PauseRequest{
		Args: []string{"/bin/sh", "-c", "echo broken >&3"}, Dir: t.TempDir(),
	}})
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("run-pause = %v, want pause's own message", err)
	}
	if _, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpStatus, ID: "pod1"}); !monitor.IsCode(err, monitor.CodeNotFound) {
		t.Errorf("status of a pause that failed to start = %v, want not-found", err)
	}
}

// A pause that fails its setup and exits before the monitor moves it into
// the pod's cgroups: the failed move reports pause's own message. The
// first cgroup.procs is a FIFO that pause opens once its message is sent,
// so that the second move, which fails (no such cgroup), comes after it.
func TestRunPauseFailureBeforeCgroupMove(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, missing := t.TempDir(), filepath.Join(t.TempDir(), "gone")
	fifo := filepath.Join(first, "cgroup.procs")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Joined in the order of libcontainer's v1 controllers: memory, then
	// cpu.
	_, err := e.client.Call(ctx, &monitor.Request{Op: monitor.OpRunPause, ID: "pod1", Pause: &monitor.PauseRequest{
		Args:        []string{"/bin/sh", "-c", `echo "sysctl net.x: no such file" >&3; exec 3>&-; cat "$0" >/dev/null`, fifo},
		Dir:         t.TempDir(),
		Cgroup:      "/berth-monitord-test/pod1",
		CgroupPaths: map[string]string{"memory": first, "cpu": missing},
	}})
	if err == nil || !strings.Contains(err.Error(), "pause: sysctl net.x: no such file") {
		t.Fatalf("run-pause = %v, want pause's own message", err)
	}
}

func statusField(t *testing.T, pid int, key string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return ""
}
