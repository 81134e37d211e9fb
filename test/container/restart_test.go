package container_test

import (
	"os"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestBerthKilled kills berth with SIGKILL while one container prints
// continuously and another exits: the printer keeps printing with no gap in
// its log, and the exit is reported with its real code after the restart.
func TestBerthKilled(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("survive")
	pod := e.runPod(podCfg)
	printer := e.run(pod, podCfg, e.ctrConfig("printer", "i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.002; done"))
	quitter := e.run(pod, podCfg, e.ctrConfig("quitter", "sleep 1; exit 7"))
	logPath := e.status(printer).LogPath
	time.Sleep(300 * time.Millisecond)

	e.d.Kill()
	// The quitter exits and the printer prints while berth is down.
	downtime := time.Now()
	time.Sleep(1500 * time.Millisecond)
	before, _ := os.ReadFile(logPath)
	time.Sleep(300 * time.Millisecond)
	after, _ := os.ReadFile(logPath)
	if len(after) <= len(before) {
		t.Fatalf("the log did not grow while berth was down")
	}
	e.d.Restart()

	st := e.status(quitter)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 7 || st.Reason != "Error" {
		t.Fatalf("quitter after restart: state %s code %d reason %q", st.State, st.ExitCode, st.Reason)
	}
	if fin := time.Unix(0, st.FinishedAt); fin.Before(downtime) || fin.After(time.Now()) {
		t.Fatalf("finished at %s, berth was down from %s", fin, downtime)
	}
	if st := e.status(printer); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("printer after restart: %s", st.State)
	}
	// Berth works with the old monitor: stop the printer, then check the
	// whole log.
	time.Sleep(200 * time.Millisecond)
	if _, err := e.d.Runtime.StopContainer(framework.Ctx(t), &runtimeapi.StopContainerRequest{ContainerId: printer}); err != nil {
		t.Fatal(err)
	}
	n := checkSequence(t, logText(t, logPath), -1)
	if n < 200 || !strings.Contains(string(after), "line-") {
		t.Fatalf("only %d lines", n)
	}
}
