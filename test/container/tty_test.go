package container_test

import (
	"os"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestTTYAndStdin creates and starts a container with a terminal and an
// open stdin, as `kubectl run -it` asks for one: its stdin and stdout are
// the terminal, what it writes lands in its log (one stream, stdout), and
// its stdin stays open with nobody attached (a read blocks, it does not
// see end of file).
func TestTTYAndStdin(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("tty")
	pod := e.runPod(podCfg)
	cfg := e.ctrConfig("term", `[ -t 0 ] && [ -t 1 ] && echo "terminal $(tty)"; echo to-stderr >&2; read line; echo "read returned: $line"`)
	cfg.Tty, cfg.Stdin = true, true
	id := e.create(pod, podCfg, cfg)
	e.start(id)
	logPath := e.status(id).LogPath

	var text string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		text = logText(t, logPath)
		if strings.Contains(text, "to-stderr") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(text, "terminal /dev/pts/") {
		t.Errorf("log %q: stdin and stdout are not a terminal", text)
	}
	// A terminal has one stream: stderr comes through it too.
	if !strings.Contains(text, "to-stderr") {
		t.Errorf("log %q: stderr is missing", text)
	}
	data, _ := os.ReadFile(logPath)
	for _, rec := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.SplitN(rec, " ", 3); len(f) < 2 || f[1] != "stdout" {
			t.Errorf("log record %q: a terminal's output is stdout", rec)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container with an open stdin is %v (log %q): its read saw end of file", st.State, logText(t, logPath))
	}
	if strings.Contains(logText(t, logPath), "read returned") {
		t.Fatal("read on the open stdin returned")
	}
	// Exec works beside the terminal.
	if r := e.exec(id, 10, "echo", "exec-ok"); r.ExitCode != 0 || strings.TrimSpace(string(r.Stdout)) != "exec-ok" {
		t.Errorf("exec: %d %q %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	if _, err := e.d.Runtime.StopContainer(framework.Ctx(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); err != nil {
		t.Fatal(err)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("after stop: %v", st.State)
	}
}
