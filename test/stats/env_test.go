package stats_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

type env struct {
	t      *testing.T
	d      *framework.Daemon
	image  string
	parent string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	framework.RequireRoot(t)
	reg := framework.TestRegistry(t)
	e := &env{t: t, image: reg + "/library/busybox:latest", parent: "/berth-stats-e2e-" + framework.RandHex(4)}
	n := cnitest.NewNet(t)
	// Registered first, so it runs last: after the daemon's cleanup has
	// removed the pods inside it.
	t.Cleanup(func() {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + e.parent)
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	e.d = framework.StartDaemon(t, framework.WithArgs("--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.BinDir))
	if _, err := e.d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: e.image}}); err != nil {
		t.Fatalf("pull %s: %v", e.image, err)
	}
	return e
}

func (e *env) runPod(name string) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: "uid-" + name + "-" + framework.RandHex(3)},
		Hostname:     name,
		LogDirectory: e.t.TempDir(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.parent},
	}
	resp, err := e.d.Runtime.RunPodSandbox(framework.Ctx(e.t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatalf("RunPodSandbox: %v", err)
	}
	return resp.PodSandboxId, cfg
}

// run creates and starts a busybox container running script.
func (e *env) run(pod string, podCfg *runtimeapi.PodSandboxConfig, name, script string, tweak func(*runtimeapi.ContainerConfig)) string {
	e.t.Helper()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: e.image},
		Command:  []string{"sh", "-c", script},
		LogPath:  name + ".log",
	}
	if tweak != nil {
		tweak(cfg)
	}
	resp, err := e.d.Runtime.CreateContainer(framework.Ctx(e.t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		e.t.Fatalf("CreateContainer %s: %v", name, err)
	}
	if _, err := e.d.Runtime.StartContainer(framework.Ctx(e.t), &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
		e.t.Fatalf("StartContainer %s: %v", name, err)
	}
	return resp.ContainerId
}

func (e *env) waitExit(id string, within time.Duration) *runtimeapi.ContainerStatus {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := e.d.Runtime.ContainerStatus(framework.Ctx(e.t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			e.t.Fatal(err)
		}
		if resp.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return resp.Status
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("container %s still %s after %s", id, resp.Status.State, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
