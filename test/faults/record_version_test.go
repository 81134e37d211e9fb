package faults_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestRecordOfNewerVersion: a pod's and its container's records say a
// format version this berth does not know (as a newer berth, then
// downgraded, would leave them). The restarted berth must not guess at
// them: both files stay byte for byte, a warning names each file and both
// versions, what the pod holds (pause, netns pin, container) is left
// running, and the other pods are served as before. Once the records are
// of a known version again, the pod is back and goes cleanly.
func TestRecordOfNewerVersion(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-recver")
	c := &crasher{t: t, e: e}
	before := framework.SnapshotHost(t, crashScope(e))
	other := c.newBystander()
	future := c.newBystander()
	pause := pausePid(e, future.pod)

	e.D.Kill()
	files := []string{
		filepath.Join(e.D.State, "sandboxes", future.pod+".json"),
		filepath.Join(e.D.State, "container-records", future.ctr+".json"),
	}
	written := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(`{"formatVersion":1,`)) {
			t.Fatalf("%s does not begin with its format version 1: %.80s", f, b)
		}
		newer := bytes.Replace(b, []byte(`"formatVersion":1,`), []byte(`"formatVersion":99,`), 1)
		if err := os.WriteFile(f, newer, 0o600); err != nil {
			t.Fatal(err)
		}
		written[f] = newer
	}
	logged := logSize(e.D.LogPath)
	e.D.Restart()

	pods, err := e.D.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Id != other.pod {
		t.Errorf("listed %d pods (%v), want only %s", len(pods.Items), pods.Items, other.pod)
	}
	if pid := c.ctrPid(other.ctr); pid != other.pid {
		t.Errorf("the other pod's container has pid %q after the restart, %q before", pid, other.pid)
	}
	if _, err := e.D.Runtime.ContainerStatus(framework.Ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: future.ctr}); err == nil {
		t.Errorf("the container whose record is of version 99 is served")
	}
	for f, want := range written {
		if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s changed by the restart (err %v):\n got %.120s\nwant %.120s", f, err, got, want)
		}
	}
	log, err := os.ReadFile(e.D.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		found := false
		for line := range strings.Lines(string(log[logged:])) {
			if strings.Contains(line, f) && strings.Contains(line, "format version 99, newer than version 1") {
				found = true
				if !strings.Contains(line, "level=WARN") {
					t.Errorf("logged, but not at warn: %s", line)
				}
			}
		}
		if !found {
			t.Errorf("no log line names %s and its versions", f)
		}
	}
	if err := syscall.Kill(pause, 0); err != nil {
		t.Errorf("pause (%d) of the pod of version 99: %v; it must be left running", pause, err)
	}
	if _, err := os.Stat(filepath.Join(e.D.State, "netns", future.pod)); err != nil {
		t.Errorf("the netns pin of the pod of version 99: %v", err)
	}
	if _, err := os.Stat("/proc/" + future.pid); err != nil {
		t.Errorf("the container (pid %s) of the pod of version 99: %v; it must be left running", future.pid, err)
	}

	// A berth that reads them again: back, and removed cleanly.
	e.D.Kill()
	for _, f := range files {
		b := bytes.Replace(written[f], []byte(`"formatVersion":99,`), []byte(`"formatVersion":1,`), 1)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.D.Restart()
	if st := c.podState(future.pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod %s is %s once its record is of version 1 again", future.pod, st)
	}
	if pid := c.ctrPid(future.ctr); pid != future.pid {
		t.Errorf("its container has pid %q, %q before", pid, future.pid)
	}
	c.removeAll()
	framework.CheckHost(t, before)
}
