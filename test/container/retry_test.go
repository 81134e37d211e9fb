package container_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	fp "github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/test/framework"
)

// TestCreateContainerRetriedAfterDeadline plays the kubelet whose
// CreateContainer outlived its deadline: the create is slow (the rootfs
// step takes 4 s, a fault point's delay) and the call gives up after 1 s.
// Its retry, sent while the first create is still at work, must wait for
// it and get its container, not "name is reserved" (containerd's answer,
// which leaves the kubelet stuck until the first container is removed);
// the first call's failure is a warning in berth's log naming the pod, the
// container being made and the step it is at. A later create of the same
// name, whose answer was delivered, is a duplicate: AlreadyExists.
func TestCreateContainerRetriedAfterDeadline(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "reached")
	e := newEnv(t, framework.WithEnv(fp.Env(fp.CreateRootfs, marker, 4*time.Second)...))
	podCfg := e.podConfig("retry")
	pod := e.runPod(podCfg)
	cfg := e.ctrConfig("app", "echo retried")
	req := &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg}

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := e.d.Runtime.CreateContainer(ctx, req)
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("CreateContainer with a 1 s deadline on a 4 s create: %v, want DeadlineExceeded", err)
	}
	// The slow step is reached in some 0.1 s; on a loaded machine the
	// give-up may come before it, and name an earlier step.
	_, statErr := os.Stat(marker)
	atSlowStep := statErr == nil
	// The retry comes while the first create still sleeps in it.
	id := e.create(pod, podCfg, cfg)

	// berth's log: the give-up, at warn, naming what it was about.
	line := waitLogLine(t, e.d.LogPath, "method=CreateContainer")
	// Canceled or DeadlineExceeded: the client's deadline and berth's
	// copy of it end at about the same instant.
	if !strings.Contains(line, "code=DeadlineExceeded") && !strings.Contains(line, "code=Canceled") {
		t.Errorf("log line %q: want code DeadlineExceeded or Canceled", line)
	}
	step := `at step \"`
	if atSlowStep {
		step = `at step \"rootfs mount\"`
	}
	for _, want := range []string{"level=WARN", "pod=" + pod, `container_name="app (attempt 0)"`, step, "container " + id} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}

	resp, err := e.d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod}})
	if err != nil || len(resp.Containers) != 1 || resp.Containers[0].Id != id {
		t.Fatalf("containers of the pod: %v, %v; want only %s", resp.GetContainers(), err, id)
	}
	if _, err := e.d.Runtime.CreateContainer(framework.Ctx(t), req); status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), id) {
		t.Fatalf("create of a name already answered: %v, want AlreadyExists naming %s", err, id)
	}
	e.start(id)
	if st := e.waitExit(id, 20*time.Second); st.ExitCode != 0 || logText(t, st.LogPath) != "retried" {
		t.Fatalf("the retried container: %v, log %q", st, logText(t, st.LogPath))
	}
}

// waitLogLine returns the first line of berth's log holding all of want,
// waiting a little for it to be written.
func waitLogLine(t *testing.T, path string, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		for _, line := range strings.Split(string(b), "\n") {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			if ok && line != "" {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line of %s holds %q:\n%s", path, want, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
