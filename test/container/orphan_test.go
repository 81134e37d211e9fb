package container_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestHostPIDOrphansReaped: a process orphaned in a container that shares
// the host's PID namespace is reparented to the pod's monitor (a child
// subreaper); the monitor reaps it when it exits, so no zombie is left.
// The pod's first container has a PID namespace of its own, so the
// monitor starts watching for orphans only once the host-PID one comes.
func TestHostPIDOrphansReaped(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("orphans")
	pod := e.runPod(podCfg)
	e.run(pod, podCfg, e.ctrConfig("own-pid", "exec sleep 1000"))
	_, pause := e.podStatus(pod)
	mon := framework.MonitorOf(t, pod, pause)

	cfg := e.ctrConfig("host-pid", "exec sleep 1000")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_NODE
	id := e.run(pod, podCfg, cfg)
	// The subshell exits at once, leaving its sleep without a parent.
	out := e.exec(id, 10, "sh", "-c", "(sleep 1 >/dev/null 2>&1 & echo $!)")
	pid, err := strconv.Atoi(strings.TrimSpace(string(out.Stdout)))
	if err != nil {
		t.Fatalf("orphan's pid: %q: %v", out.Stdout, err)
	}
	if ppid := framework.ParentPID(t, pid); ppid != mon {
		t.Fatalf("orphan %d's parent is %d, want the monitor %d", pid, ppid, mon)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, ok := framework.ProcState(pid)
		if !ok {
			return // reaped
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d still there (state %s) 10 s after the exec, 9 s after its exit", pid, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
