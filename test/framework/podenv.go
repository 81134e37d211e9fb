package framework

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
)

// PodEnv is a berth daemon on the test bridge network with busybox pulled,
// and helpers to run pods and containers under one cgroup parent.
type PodEnv struct {
	T      *testing.T
	D      *Daemon
	Image  string
	Parent string
	Net    *cnitest.Net
}

// NewPodEnv starts it; prefix names the test's cgroup parent.
func NewPodEnv(t *testing.T, prefix string) *PodEnv {
	t.Helper()
	return NewPodEnvWith(t, prefix)
}

// NewPodEnvWith is NewPodEnv with options for its daemon.
func NewPodEnvWith(t *testing.T, prefix string, opts ...Option) *PodEnv {
	t.Helper()
	RequireRoot(t)
	reg := TestRegistry(t)
	e := &PodEnv{T: t, Image: reg + "/library/busybox:latest", Parent: "/" + prefix + "-" + RandHex(4)}
	n := cnitest.NewNet(t)
	e.Net = n
	// Registered first, so it runs last: after the daemon's cleanup has
	// removed the pods inside it.
	t.Cleanup(func() { RemoveCgroup(e.Parent) })
	e.D = StartDaemon(t, append([]Option{WithArgs("--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.BinDir)}, opts...)...)
	if _, err := e.D.Image.PullImage(Ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: e.Image}}); err != nil {
		t.Fatalf("pull %s: %v", e.Image, err)
	}
	return e
}

// RunPod runs a pod under e's cgroup parent.
func (e *PodEnv) RunPod(name string) (string, *runtimeapi.PodSandboxConfig) {
	e.T.Helper()
	return e.RunPodWith(name, nil)
}

// RunPodWith is RunPod letting tweak change the pod's config first (a
// shared PID namespace, say).
func (e *PodEnv) RunPodWith(name string, tweak func(*runtimeapi.PodSandboxConfig)) (string, *runtimeapi.PodSandboxConfig) {
	e.T.Helper()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: "uid-" + name + "-" + RandHex(3)},
		Hostname:     name,
		LogDirectory: e.T.TempDir(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.Parent},
	}
	if tweak != nil {
		tweak(cfg)
	}
	resp, err := e.D.Runtime.RunPodSandbox(Ctx(e.T), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.T.Fatalf("RunPodSandbox %s: %v", name, err)
	}
	return resp.PodSandboxId, cfg
}

// Run creates and starts a busybox container running script.
func (e *PodEnv) Run(pod string, podCfg *runtimeapi.PodSandboxConfig, name, script string, tweak func(*runtimeapi.ContainerConfig)) string {
	e.T.Helper()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: e.Image},
		Command:  []string{"sh", "-c", script},
		LogPath:  name + ".log",
	}
	if tweak != nil {
		tweak(cfg)
	}
	resp, err := e.D.Runtime.CreateContainer(Ctx(e.T), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		e.T.Fatalf("CreateContainer %s: %v", name, err)
	}
	if _, err := e.D.Runtime.StartContainer(Ctx(e.T), &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
		e.T.Fatalf("StartContainer %s: %v", name, err)
	}
	return resp.ContainerId
}

func (e *PodEnv) WaitExit(id string, within time.Duration) *runtimeapi.ContainerStatus {
	e.T.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := e.D.Runtime.ContainerStatus(Ctx(e.T), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			e.T.Fatal(err)
		}
		if resp.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return resp.Status
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("container %s still %s after %s", id, resp.Status.State, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
