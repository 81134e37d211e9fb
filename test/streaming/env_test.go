package streaming_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	crictl string
	cfg    string // an empty crictl config: no host file may leak in
}

func newEnv(t *testing.T) *env {
	t.Helper()
	framework.RequireRoot(t)
	reg := framework.TestRegistry(t)
	e := &env{t: t, image: reg + "/library/busybox:latest", parent: "/berth-stream-e2e-" + framework.RandHex(4), crictl: crictlBinary(t)}
	e.cfg = filepath.Join(t.TempDir(), "crictl.yaml")
	os.WriteFile(e.cfg, nil, 0o644)
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

// crictlBinary is $BERTH_CRICTL, else the test bed's cached build.
func crictlBinary(t *testing.T) string {
	if p := os.Getenv(framework.EnvCrictl); p != "" {
		return p
	}
	if m, _ := filepath.Glob("/var/cache/berth-dev/cri-tools-*/crictl"); len(m) > 0 {
		return m[0]
	}
	return framework.Crictl(t) // skips
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

// crictlCmd is a crictl command against the daemon.
func (e *env) crictlCmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--config", e.cfg, "--runtime-endpoint", "unix://" + e.d.Socket, "--timeout", "20s"}, args...)
	return exec.CommandContext(ctx, e.crictl, full...)
}

// crictlRun runs crictl with stdin and returns its output and error.
func (e *env) crictlRun(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := e.crictlCmd(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
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

var transports = []string{"spdy", "websocket"}
