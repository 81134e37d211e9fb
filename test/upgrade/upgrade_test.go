package upgrade_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// monitorPaths are what makes up the pod's monitor; the default commit
// upgraded from is the one before the newest change to them.
var monitorPaths = []string{"monitor", "cmd/berth-monitor", "container/monitor", "container/monitord"}

// fromCommit is the commit whose berth is upgraded from.
func fromCommit(t *testing.T) string {
	t.Helper()
	if c := os.Getenv("BERTH_UPGRADE_FROM"); c != "" {
		return c
	}
	if framework.Git(t, "rev-parse", "--is-shallow-repository") == "true" {
		t.Skip("a shallow clone holds no earlier commit to upgrade from (set BERTH_UPGRADE_FROM, or fetch the history)")
	}
	last := framework.Git(t, append([]string{"log", "-1", "--format=%H", "--"}, monitorPaths...)...)
	return last + "^"
}

var tick = regexp.MustCompile(`stdout F tick (\d+)\n`)

// ticks are the numbers a ticking container logged, in order.
func ticks(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, m := range tick.FindAllStringSubmatch(string(data), -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// waitTick waits until the log at path holds a tick past n.
func waitTick(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := ticks(t, path); len(got) > 0 && got[len(got)-1] > n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no tick past %d in 10 s: the log stopped flowing", path, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const ticker = `i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done`

// TestUpgradeInPlace: pods and containers made by the berth of an earlier
// commit are adopted by the berth under test, their monitors (the earlier
// commit's) still running: listed as they were, logs flowing through the
// swap without a gap, exec, a new container in an old pod, log reopen,
// stop and remove working, and nothing left on the host.
func TestUpgradeInPlace(t *testing.T) {
	from := fromCommit(t)
	old := framework.BuildCommit(t, from)
	t.Logf("upgrading from %s (%s)", from, framework.Git(t, "log", "-1", "--format=%h %s", from))
	// The old berth's pods have the Go monitor, as every pod made before
	// the C pod process existed has: an old berth that knows both kinds is
	// asked for it. The berth under test makes its new pods with its own
	// kind (framework.EnvPodProcess, or its default), and serves both
	// kinds side by side.
	var oldArgs []string
	if help, _ := exec.Command(old, "--help").CombinedOutput(); strings.Contains(string(help), "-pod-process") {
		oldArgs = []string{"--pod-process", "monitor"}
	}
	e := framework.NewPodEnvWith(t, "berth-upgrade", framework.WithBinary(old), framework.WithArgs(oldArgs...))
	before := framework.SnapshotHost(t, e.Scope())

	podA, cfgA := e.RunPod("a")
	podB, cfgB := e.RunPod("b")
	a1 := e.Run(podA, cfgA, "a1", ticker, nil)
	b1 := e.Run(podB, cfgB, "b1", "sleep 1000", nil)
	b2 := e.Run(podB, cfgB, "b2", "echo done; exit 3", nil)
	e.WaitExit(b2, 10*time.Second)
	logA1 := filepath.Join(cfgA.LogDirectory, "a1.log")
	waitTick(t, logA1, 0)

	monitors := map[string]int{}
	pids := map[string]string{}
	for _, pod := range []string{podA, podB} {
		monitors[pod] = framework.MonitorOf(t, pod, pausePid(t, e, pod))
	}
	for _, id := range []string{a1, b1} {
		pids[id] = ctrPid(t, e, id)
	}

	// The swap, as a package upgrade does it: the old berth stopped (its
	// monitors stay), the new binaries started on the same state.
	if err := e.D.Stop(); err != nil {
		t.Fatalf("stop the old berth: %v", err)
	}
	downAt := ticks(t, logA1)
	e.D.SetBinary("")
	e.D.Args = e.D.Args[:len(e.D.Args)-len(oldArgs)]
	e.D.Restart()

	// Listed as they were, by the same processes.
	for _, pod := range []string{podA, podB} {
		st, err := e.D.Runtime.PodSandboxStatus(framework.Ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
		if err != nil || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Fatalf("pod %s after the upgrade: %v %v", pod, st.GetStatus().GetState(), err)
		}
		if m := framework.MonitorOf(t, pod, pausePid(t, e, pod)); m != monitors[pod] {
			t.Errorf("pod %s's monitor is %d, was %d: it must outlive the upgrade", pod, m, monitors[pod])
		}
	}
	for id, pid := range pids {
		if got := ctrPid(t, e, id); got != pid {
			t.Errorf("container %s has pid %q after the upgrade, %q before", id, got, pid)
		}
	}
	st, err := e.D.Runtime.ContainerStatus(framework.Ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: b2})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Status.ExitCode != 3 {
		t.Errorf("exited container b2 after the upgrade: %+v %v, want exited with 3", st.GetStatus(), err)
	}
	listed, err := e.D.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{})
	if err != nil || len(listed.Containers) != 3 {
		t.Errorf("ListContainers after the upgrade: %d containers (%v), want 3", len(listed.GetContainers()), err)
	}

	// Logs kept flowing while no berth ran, and still flow, without a gap.
	last := downAt[len(downAt)-1]
	waitTick(t, logA1, last+5)
	got := ticks(t, logA1)
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Errorf("%s: tick %d follows tick %d", logA1, got[i], got[i-1])
			break
		}
	}

	// Exec through the old monitor.
	res, err := e.D.Runtime.ExecSync(framework.Ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: b1, Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 4"}, Timeout: 10})
	if err != nil || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 4 {
		t.Errorf("ExecSync in b1 after the upgrade: %+v %v", res, err)
	}
	// A log rotation.
	rotated := logA1 + ".1"
	if err := os.Rename(logA1, rotated); err != nil {
		t.Fatal(err)
	}
	if _, err := e.D.Runtime.ReopenContainerLog(framework.Ctx(t), &runtimeapi.ReopenContainerLogRequest{ContainerId: a1}); err != nil {
		t.Errorf("ReopenContainerLog a1 after the upgrade: %v", err)
	} else {
		waitTick(t, logA1, 0)
	}
	// A new container in an old pod (the kubelet's restart of a crashed
	// one), made by the old monitor for the new berth, and a new pod.
	a2 := e.Run(podA, cfgA, "a2", ticker, nil)
	waitTick(t, filepath.Join(cfgA.LogDirectory, "a2.log"), 2)
	podC, cfgC := e.RunPod("c")
	c1 := e.Run(podC, cfgC, "c1", "sleep 1000", nil)
	checkKinds(t, e, []string{podA, podB}, podC)
	if res, err := e.D.Runtime.ExecSync(framework.Ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: c1, Cmd: []string{"echo", "new"}, Timeout: 10}); err != nil || string(res.Stdout) != "new\n" {
		t.Errorf("ExecSync in the new pod: %+v %v", res, err)
	}

	// Stop and remove everything, the old pods and the new.
	for _, id := range []string{a1, a2, b1, c1} {
		if _, err := e.D.Runtime.StopContainer(framework.Ctx(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 2}); err != nil {
			t.Errorf("StopContainer %s: %v", id, err)
		}
		if st := e.WaitExit(id, 10*time.Second); st.FinishedAt == 0 {
			t.Errorf("container %s: exit without a time", id)
		}
	}
	for _, id := range []string{a1, a2, b1, b2, c1} {
		if _, err := e.D.Runtime.RemoveContainer(framework.Ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Errorf("RemoveContainer %s: %v", id, err)
		}
	}
	for _, pod := range []string{podA, podB, podC} {
		if _, err := e.D.Runtime.StopPodSandbox(framework.Ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Errorf("StopPodSandbox %s: %v", pod, err)
		}
		if _, err := e.D.Runtime.RemovePodSandbox(framework.Ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Errorf("RemovePodSandbox %s: %v", pod, err)
		}
	}
	for pod, pid := range monitors {
		waitGone(t, pid, fmt.Sprintf("pod %s's old monitor", pod))
	}
	framework.CheckHost(t, before)
}

// checkKinds: the old pods keep the Go monitor; the new pod has the kind
// the run asks for (the Go monitor by default).
func checkKinds(t *testing.T, e *framework.PodEnv, old []string, new string) {
	t.Helper()
	comm := func(pod string) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", framework.MonitorOf(t, pod, pausePid(t, e, pod))))
		return strings.TrimSpace(string(b))
	}
	for _, pod := range old {
		if got := comm(pod); got != "berth-monitor" {
			t.Errorf("old pod %s's own process is %q, want berth-monitor", pod, got)
		}
	}
	want := framework.PodProcessBinary()
	if got := comm(new); got != want {
		t.Errorf("new pod %s's own process is %q, want %s", new, got, want)
	}
}

func pausePid(t *testing.T, e *framework.PodEnv, pod string) int {
	t.Helper()
	resp, err := e.D.Runtime.PodSandboxStatus(framework.Ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod, Verbose: true})
	if err != nil {
		t.Fatalf("PodSandboxStatus %s: %v", pod, err)
	}
	return infoPid(t, "pod "+pod, resp.Info)
}

func ctrPid(t *testing.T, e *framework.PodEnv, id string) string {
	t.Helper()
	resp, err := e.D.Runtime.ContainerStatus(framework.Ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	if resp.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return ""
	}
	return strconv.Itoa(infoPid(t, "container "+id, resp.Info))
}

// infoPid is the pid in a verbose status's "info" document.
func infoPid(t *testing.T, what string, info map[string]string) int {
	t.Helper()
	var v struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil || v.Pid <= 0 {
		t.Fatalf("%s: no pid in verbose info %q (%v)", what, info["info"], err)
	}
	return v.Pid
}

func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for framework.Running(pid) {
		if time.Now().After(deadline) {
			t.Errorf("%s (%d) still runs", what, pid)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
