package faults_test

import (
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestRestartWithFrozenMonitor: one pod's monitor is stopped (SIGSTOP,
// as a wedged process would be) when berth crashes and comes back. berth
// must still come up (it waited forever on that monitor) and serve the
// other pods; the frozen pod stays as recorded, not killed for its
// monitor's silence, and once its monitor runs again both pods go cleanly.
func TestRestartWithFrozenMonitor(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-frozen")
	c := &crasher{t: t, e: e}
	before := framework.SnapshotHost(t, crashScope(e))
	healthy := c.newBystander()
	frozen := c.newBystander()

	mon := framework.MonitorOf(t, frozen.pod, pausePid(e, frozen.pod))
	if err := syscall.Kill(mon, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			syscall.Kill(mon, syscall.SIGCONT)
			thawed = true
		}
	}
	t.Cleanup(thaw)

	e.D.Kill()
	e.D.Restart()
	if pid := c.ctrPid(healthy.ctr); pid != healthy.pid {
		t.Errorf("the healthy pod's container has pid %q after the restart, %q before", pid, healthy.pid)
	}
	if st := c.podState(frozen.pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("the pod whose monitor is stopped is %s after the restart; its pause still runs", st)
	}
	if st := c.ctrState(frozen.ctr); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the container whose monitor is stopped is %s after the restart; it still runs", st)
	}

	thaw()
	c.removeAll()
	framework.CheckHost(t, before)
}

// TestRestartWithWedgedMonitors: four pods' monitors are stopped when
// berth comes back. Recovery adopts each pod's monitor with a timeout
// (sandbox.adoptTimeout, 5 s), and the pod's containers are then kept as
// recorded without asking the silent monitor again: done pod after pod,
// that was 20 s before berth served anything. Pods are recovered side by
// side, so the four timeouts run at the same time: each pod is handled
// (kept as recorded, its silence logged for its pause and its containers)
// and the socket answers well before 4 timeouts have passed.
func TestRestartWithWedgedMonitors(t *testing.T) {
	const wedged = 4
	const answerTimeout = 5 * time.Second // container.monitorAnswerTimeout, sandbox.adoptTimeout
	e := framework.NewPodEnv(t, "berth-wedged")
	c := &crasher{t: t, e: e}
	before := framework.SnapshotHost(t, crashScope(e))
	healthy := c.newBystander()
	var frozen []*crashBystander
	var mons []int
	for range wedged {
		b := c.newBystander()
		frozen = append(frozen, b)
		mons = append(mons, framework.MonitorOf(t, b.pod, pausePid(e, b.pod)))
	}
	thawed := false
	thaw := func() {
		if !thawed {
			for _, m := range mons {
				syscall.Kill(m, syscall.SIGCONT)
			}
			thawed = true
		}
	}
	t.Cleanup(thaw)
	for _, m := range mons {
		if err := syscall.Kill(m, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}

	e.D.Kill()
	logged := logSize(e.D.LogPath)
	start := time.Now()
	e.D.Restart() // fails the test unless the socket answers within 30 s
	served := time.Since(start)
	t.Logf("berth served %.1f s after its start with %d wedged monitors (%d s of monitor timeouts in a row)", served.Seconds(), wedged, wedged*int(answerTimeout.Seconds()))

	// Every wedged pod was handled: its container's silence and its
	// pause's logged, the pod kept as recorded.
	ctrWarn, podWarn := silences(t, e.D.LogPath, logged)
	for _, b := range frozen {
		if _, ok := ctrWarn[b.pod]; !ok {
			t.Errorf("no warning that pod %s's monitor does not answer for its container", b.pod)
		}
		if _, ok := podWarn[b.pod]; !ok {
			t.Errorf("no warning that pod %s's pause runtime does not answer", b.pod)
		}
		if st := c.podState(b.pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("pod %s, its monitor stopped, is %s after the restart; its pause still runs", b.pod, st)
		}
		if st := c.ctrState(b.ctr); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s, its monitor stopped, is %s after the restart; it still runs", b.ctr, st)
		}
	}
	// Side by side: the pods' timeouts ran out together, not one
	// timeout apart each, and the socket answered before the wedged
	// pods' timeouts of one kind could have passed in a row.
	for kind, at := range map[string]map[string]time.Time{"container": ctrWarn, "pause": podWarn} {
		if spread := spreadOf(at); len(at) == wedged && spread >= answerTimeout {
			t.Errorf("the %d %s timeouts ended %s apart: handled one after the other", wedged, kind, spread)
		} else {
			t.Logf("the %d %s timeouts ended within %s", len(at), kind, spread)
		}
	}
	if served >= wedged*answerTimeout {
		t.Errorf("berth served %s after its start: more than %d monitor timeouts in a row", served, wedged)
	}
	if pid := c.ctrPid(healthy.ctr); pid != healthy.pid {
		t.Errorf("the healthy pod's container has pid %q after the restart, %q before", pid, healthy.pid)
	}

	thaw()
	c.removeAll()
	framework.CheckHost(t, before)
}

var (
	logTime = regexp.MustCompile(`\btime=(\S+)`)
	logPod  = regexp.MustCompile(`\bpod=([0-9a-f]{64})`)
)

// silences reads, past offset of berth's log, when each pod's monitor
// was found silent: for its containers, and for its pause.
func silences(t *testing.T, path string, offset int64) (ctr, pause map[string]time.Time) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctr, pause = map[string]time.Time{}, map[string]time.Time{}
	for line := range strings.Lines(string(b[offset:])) {
		var into map[string]time.Time
		switch {
		case strings.Contains(line, "pod monitor does not answer"):
			into = ctr
		case strings.Contains(line, "pause's runtime does not answer"):
			into = pause
		default:
			continue
		}
		tm, pod := logTime.FindStringSubmatch(line), logPod.FindStringSubmatch(line)
		if tm == nil || pod == nil {
			t.Fatalf("log line without time or pod: %s", line)
		}
		at, err := time.Parse(time.RFC3339Nano, tm[1])
		if err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		into[pod[1]] = at
	}
	return ctr, pause
}

func spreadOf(at map[string]time.Time) time.Duration {
	var first, last time.Time
	for _, t := range at {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return last.Sub(first)
}
