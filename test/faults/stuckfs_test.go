package faults_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// The deadlines of issue 19: a FUSE filesystem that stops answering, as a
// container's hostPath volume (its process reads it and, once SIGKILLed,
// sits in D) and mounted inside another container's writable layer. No
// CRI call outlives its deadline by more than a second, a call that cannot
// finish says what is stuck, calls about another pod are not held up, and
// once the connection is aborted a retry cleans everything up.

// killGrace is the stop timeout given to containers that ignore SIGTERM;
// stopSlack is what a stop may take past it (berth waits 5 s after
// SIGKILL) plus a second for the answer.
const (
	killGrace = 2 * time.Second
	stopSlack = 6 * time.Second
)

// within calls fn under a deadline of d and fails the test if it returns
// more than a second after it.
func within(t *testing.T, what string, d time.Duration, fn func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	took := time.Since(start)
	if took > d+time.Second {
		t.Errorf("%s took %s, deadline %s", what, took.Round(time.Millisecond), d)
	}
	if err != nil || took > 100*time.Millisecond {
		t.Logf("%s: %s, %v", what, took.Round(time.Millisecond), err)
	}
	return err
}

func hostPathVolume(src, dst string) func(*runtimeapi.ContainerConfig) {
	return func(c *runtimeapi.ContainerConfig) {
		c.Mounts = append(c.Mounts, &runtimeapi.Mount{HostPath: src, ContainerPath: dst})
	}
}

// blockedIn waits until a process of the container is asleep in a FUSE
// request (the kernel's wait for the server's answer).
func blockedIn(t *testing.T, e *framework.PodEnv, id string) {
	t.Helper()
	pid := containerPid(e, id)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range append(childrenOf(pid), pid) {
			w, _ := os.ReadFile(filepath.Join("/proc", itoa(p), "wchan"))
			if strings.Contains(string(w), "fuse") || strings.Contains(string(w), "request_wait_answer") {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no process of container %s waits on the FUSE mount", id)
}

// TestStuckFilesystem runs with the reader in a PID namespace of its own
// (the kubelet's default: the SIGKILLed container cannot end) and in the
// pod's (its shell ends, the D process is left to pause, which cannot).
func TestStuckFilesystem(t *testing.T) {
	for _, mode := range []runtimeapi.NamespaceMode{runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD} {
		t.Run(strings.ToLower(mode.String())+"-pid-ns", func(t *testing.T) { stuckFilesystem(t, mode) })
	}
}

func stuckFilesystem(t *testing.T, pidMode runtimeapi.NamespaceMode) {
	e := framework.NewPodEnv(t, "faults-stuckfs")
	before := framework.SnapshotHost(t, e.Scope())
	vol := mountStuckFS(t, filepath.Join(t.TempDir(), "vol"))
	rt := e.D.Runtime

	ns := &runtimeapi.NamespaceOption{Pid: pidMode}
	pod, cfg := e.RunPodWith("stuck", func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}
	})
	// Ignores SIGTERM and reads the volume in a loop: once the server
	// hangs, its ls waits; SIGKILLed, it sits in D.
	reader := e.Run(pod, cfg, "reader", "trap '' TERM; while :; do ls /vol >/dev/null; sleep 0.1; done", func(c *runtimeapi.ContainerConfig) {
		hostPathVolume(vol.Dir, "/vol")(c)
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}}
	})
	layered := e.Run(pod, cfg, "layered", "exec sleep 100000", nil)
	upper := filepath.Join(e.D.Root, "containers", layered, "upper")
	if _, err := os.Stat(upper); err != nil {
		t.Fatalf("writable layer of %s: %v", layered, err)
	}
	inLayer := mountStuckFS(t, filepath.Join(upper, "stuck"))

	other, otherCfg := e.RunPod("other")
	bystander := e.Run(other, otherCfg, "bystander", "exec sleep 100000", nil)
	second := e.Run(other, otherCfg, "second", "exec sleep 100000", nil)

	vol.Hang()
	inLayer.Hang()
	blockedIn(t, e, reader)

	const d = 5 * time.Second
	for _, id := range []string{reader, layered} {
		within(t, "ContainerStats "+id[:12], d, func(ctx context.Context) error {
			_, err := rt.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
			return err
		})
		within(t, "ContainerStatus "+id[:12], d, func(ctx context.Context) error {
			_, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			return err
		})
	}
	within(t, "ListContainerStats", d, func(ctx context.Context) error {
		resp, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
		if err == nil && len(resp.Stats) < 4 {
			t.Errorf("ListContainerStats: %d containers, want 4", len(resp.Stats))
		}
		return err
	})
	within(t, "ListPodSandboxStats", d, func(ctx context.Context) error {
		_, err := rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
		return err
	})

	// The container with the stuck mount in its writable layer stops and
	// goes: the mount is detached, never walked into.
	if err := within(t, "StopContainer layered", d, func(ctx context.Context) error {
		_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: layered, Timeout: 0})
		return err
	}); err != nil {
		t.Errorf("StopContainer of the container with a stuck mount in its layer: %v", err)
	}
	if err := within(t, "RemoveContainer layered", d, func(ctx context.Context) error {
		_, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: layered})
		return err
	}); err != nil {
		t.Errorf("RemoveContainer of the container with a stuck mount in its layer: %v", err)
	}

	// The reader cannot end: each call fails in time, naming what is stuck,
	// while calls about the other pod go on.
	// In the pod's PID namespace the container's own process (its shell)
	// does end: the container may stop, its ls is left to pause.
	stuck := func(what string, err error) {
		t.Helper()
		if err == nil {
			if pidMode == runtimeapi.NamespaceMode_POD && !strings.Contains(what, "Pod") {
				return
			}
			t.Errorf("%s of a container stuck in D succeeded", what)
			return
		}
		msg := err.Error()
		if !strings.Contains(msg, "after SIGKILL") || !strings.Contains(msg, "(ls) D (uninterruptible sleep)") {
			t.Errorf("%s: %q does not say which process is stuck where", what, msg)
		}
	}
	podDeadline := killGrace + stopSlack + 5*time.Second // pause's grace, then its kill, after the containers'

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := within(t, "ContainerStatus bystander", 3*time.Second, func(ctx context.Context) error {
				_, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: bystander})
				return err
			}); err != nil {
				t.Errorf("ContainerStatus of another pod's container: %v", err)
			}
			if err := within(t, "PodSandboxStatus other", 3*time.Second, func(ctx context.Context) error {
				_, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: other})
				return err
			}); err != nil {
				t.Errorf("PodSandboxStatus of another pod: %v", err)
			}
			if err := within(t, "ExecSync bystander", 5*time.Second, func(ctx context.Context) error {
				_, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: bystander, Cmd: []string{"true"}, Timeout: 4})
				return err
			}); err != nil {
				t.Errorf("ExecSync in another pod: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	if pidMode == runtimeapi.NamespaceMode_CONTAINER {
		// A create naming a path on the stuck filesystem as its volume
		// fails, naming the path, once berth's look at it has waited its
		// 30 s (container/guardedhost.go), and leaves nothing: the create
		// does not hold its name until the filesystem answers.
		wg.Add(1)
		go func() {
			defer wg.Done()
			createOnStuckVolume(t, e, other, otherCfg, filepath.Join(vol.Dir, "new"))
		}()
	}
	stuck("StopContainer reader", within(t, "StopContainer reader", killGrace+stopSlack+time.Second, func(ctx context.Context) error {
		_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: reader, Timeout: int64(killGrace / time.Second)})
		return err
	}))
	// Another pod's container stops and goes meanwhile.
	within(t, "StopContainer second", d, func(ctx context.Context) error {
		_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: second})
		return err
	})
	if err := within(t, "RemoveContainer second", d, func(ctx context.Context) error {
		_, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: second})
		return err
	}); err != nil {
		t.Errorf("RemoveContainer in another pod: %v", err)
	}
	stuck("RemoveContainer reader", within(t, "RemoveContainer reader", stopSlack+time.Second, func(ctx context.Context) error {
		_, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: reader})
		return err
	}))
	stuck("StopPodSandbox", within(t, "StopPodSandbox stuck", podDeadline, func(ctx context.Context) error {
		_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
		return err
	}))
	stuck("RemovePodSandbox", within(t, "RemovePodSandbox stuck", podDeadline, func(ctx context.Context) error {
		_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})
		return err
	}))
	// A deadline shorter than berth's own wait: the call still returns
	// by it.
	within(t, "StopContainer reader, 2s deadline", 2*time.Second, func(ctx context.Context) error {
		_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: reader})
		return err
	})
	close(stop)
	wg.Wait()

	// The administrator aborts the connection: the reader ends, and the
	// kubelet's retries clean everything up.
	vol.Abort()
	inLayer.Abort()
	if pidMode == runtimeapi.NamespaceMode_CONTAINER {
		e.WaitExit(reader, settle)
	}
	for _, p := range []string{pod, other} {
		if _, err := rt.StopPodSandbox(framework.Ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: p}); err != nil {
			t.Errorf("StopPodSandbox %s after the abort: %v", p, err)
		}
		if _, err := rt.RemovePodSandbox(framework.Ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p}); err != nil {
			t.Errorf("RemovePodSandbox %s after the abort: %v", p, err)
		}
	}
	framework.CheckHost(t, before)
}

// createOnStuckVolume creates a container in pod with src, on a
// filesystem that does not answer, as a hostPath volume.
func createOnStuckVolume(t *testing.T, e *framework.PodEnv, pod string, podCfg *runtimeapi.PodSandboxConfig, src string) {
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "on-stuck-volume"},
		Image:    &runtimeapi.ImageSpec{Image: e.Image},
		Command:  []string{"true"},
	}
	hostPathVolume(src, "/new")(cfg)
	const hostPathWait = 30 * time.Second
	err := within(t, "CreateContainer on a stuck volume", hostPathWait+5*time.Second, func(ctx context.Context) error {
		_, err := e.D.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
		return err
	})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), src) || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("CreateContainer with a volume on a stuck filesystem: %v, want DeadlineExceeded naming %s", err, src)
	}
	resp, err := e.D.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod}})
	if err != nil {
		t.Errorf("ListContainers: %v", err)
		return
	}
	for _, c := range resp.Containers {
		if c.GetMetadata().GetName() == "on-stuck-volume" {
			t.Errorf("the failed create left container %s (%s)", c.Id, c.State)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// childrenOf lists pid's children, from /proc.
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if f := strings.Fields(s[i+1:]); i > 0 && len(f) > 1 && f[1] == itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}
