package container_test

import (
	"os"
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
	logDir string
	// net is the daemon's CNI network.
	net *cnitest.Net
}

func newEnv(t *testing.T, opts ...framework.Option) *env {
	t.Helper()
	framework.RequireRoot(t)
	reg := framework.TestRegistry(t)
	n := cnitest.NewNet(t)
	e := &env{t: t, image: reg + "/library/busybox:latest", parent: "/berth-ctr-e2e-" + framework.RandHex(4), logDir: t.TempDir(), net: n}
	e.d = framework.StartDaemon(t, append([]framework.Option{framework.WithArgs("--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.BinDir)}, opts...)...)
	t.Cleanup(e.cleanup)
	if _, err := e.d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: e.image}}); err != nil {
		t.Fatalf("pull %s: %v", e.image, err)
	}
	return e
}

func (e *env) cleanup() {
	if e.d.Running() {
		e.d.RemoveAllPods()
	}
	framework.RemoveCgroup(e.parent)
}

func (e *env) podConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: "uid-" + name + "-" + framework.RandHex(3)},
		Hostname:     name,
		LogDirectory: filepath.Join(e.logDir, name),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.parent},
	}
}

func (e *env) runPod(cfg *runtimeapi.PodSandboxConfig) string {
	e.t.Helper()
	resp, err := e.d.Runtime.RunPodSandbox(framework.Ctx(e.t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatalf("RunPodSandbox: %v", err)
	}
	return resp.PodSandboxId
}

// ctrConfig is a busybox container running sh -c script, logging to
// <name>.log, with a security context the way the kubelet sends one
// (default masked paths, container PID namespace).
func (e *env) ctrConfig(name, script string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: e.image},
		Command:  []string{"sh", "-c", script},
		LogPath:  name + ".log",
		Labels:   map[string]string{"name": name},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			MaskedPaths:      []string{"/proc/kcore", "/proc/keys", "/sys/firmware"},
			ReadonlyPaths:    []string{"/proc/sys", "/proc/sysrq-trigger"},
		}},
	}
}

func (e *env) create(pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	e.t.Helper()
	resp, err := e.d.Runtime.CreateContainer(framework.Ctx(e.t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		e.t.Fatalf("CreateContainer %s: %v", cfg.Metadata.Name, err)
	}
	return resp.ContainerId
}

func (e *env) start(id string) {
	e.t.Helper()
	if _, err := e.d.Runtime.StartContainer(framework.Ctx(e.t), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		e.t.Fatalf("StartContainer: %v", err)
	}
}

// run creates and starts a container in pod.
func (e *env) run(pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	e.t.Helper()
	id := e.create(pod, podCfg, cfg)
	e.start(id)
	return id
}

func (e *env) status(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	resp, err := e.d.Runtime.ContainerStatus(framework.Ctx(e.t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		e.t.Fatalf("ContainerStatus: %v", err)
	}
	return resp.Status
}

// waitExit polls status (the CRI has no exit notification) until the
// container exited.
func (e *env) waitExit(id string, within time.Duration) *runtimeapi.ContainerStatus {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := e.status(id)
		if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("container %s still %s after %s", id, st.State, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) exec(id string, timeout int64, cmd ...string) *runtimeapi.ExecSyncResponse {
	e.t.Helper()
	resp, err := e.d.Runtime.ExecSync(framework.Ctx(e.t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: timeout})
	if err != nil {
		e.t.Fatalf("ExecSync %q: %v", cmd, err)
	}
	return resp
}

// output runs a container to completion and returns its log's text.
func (e *env) output(pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (string, *runtimeapi.ContainerStatus) {
	e.t.Helper()
	id := e.run(pod, podCfg, cfg)
	st := e.waitExit(id, 20*time.Second)
	return logText(e.t, st.LogPath), st
}

// logText returns the text of a CRI log, one line per record, checking
// the record format on the way.
func logText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	var out []string
	for _, rec := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if rec == "" {
			continue
		}
		f := strings.SplitN(rec, " ", 4)
		if len(f) != 4 || (f[1] != "stdout" && f[1] != "stderr") || (f[2] != "F" && f[2] != "P") {
			t.Fatalf("bad log record %q", rec)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("bad timestamp in %q", rec)
		}
		out = append(out, f[3])
	}
	return strings.Join(out, "\n")
}
