package container_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestIdempotenceOnMissing: stopping or removing a container or pod that
// does not exist succeeds (CRI; containerd answers OK too), while the
// calls that need the object answer NotFound.
func TestIdempotenceOnMissing(t *testing.T) {
	e := newEnv(t)
	ctx := framework.Ctx(t)
	missing := framework.RandHex(32)
	if _, err := e.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: missing}); err != nil {
		t.Errorf("StopContainer of a missing container: %v", err)
	}
	if _, err := e.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: missing, Timeout: 10}); err != nil {
		t.Errorf("StopContainer of a missing container, with timeout: %v", err)
	}
	if _, err := e.d.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: missing}); err != nil {
		t.Errorf("RemoveContainer of a missing container: %v", err)
	}
	if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: missing}); err != nil {
		t.Errorf("StopPodSandbox of a missing pod: %v", err)
	}
	if _, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: missing}); err != nil {
		t.Errorf("RemovePodSandbox of a missing pod: %v", err)
	}
	if _, err := e.d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: missing}); status.Code(err) != codes.NotFound {
		t.Errorf("StartContainer of a missing container: %v, want NotFound", err)
	}
	if _, err := e.d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: missing}); status.Code(err) != codes.NotFound {
		t.Errorf("PodSandboxStatus of a missing pod: %v, want NotFound", err)
	}
}

// TestRunAsGroupWithoutUser: the CRI says the runtime MUST refuse a group
// without a user, for containers and pods alike.
func TestRunAsGroupWithoutUser(t *testing.T) {
	e := newEnv(t)
	ctx := framework.Ctx(t)
	podCfg := e.podConfig("group")
	pod := e.runPod(podCfg)
	cfg := e.ctrConfig("group-only", "id")
	cfg.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: 3000}
	_, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "run_as_group") {
		t.Fatalf("CreateContainer with run_as_group alone: %v, want InvalidArgument naming run_as_group", err)
	}
	// Nothing was left behind: the name is free.
	cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
	if out, _ := e.output(pod, podCfg, cfg); !strings.Contains(out, "uid=1000") || !strings.Contains(out, "gid=3000") {
		t.Fatalf("id: %q", out)
	}

	bad := e.podConfig("group-pod")
	bad.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{RunAsGroup: &runtimeapi.Int64Value{Value: 3000}}
	_, err = e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: bad})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "run_as_group") {
		t.Fatalf("RunPodSandbox with run_as_group alone: %v, want InvalidArgument naming run_as_group", err)
	}
}

// TestAddAllCapabilities: ALL is every capability berth holds, so the
// container starts even where root lacks some (CAP_SYS_RESOURCE here),
// and gets exactly berth's bounding set.
func TestAddAllCapabilities(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("allcaps")
	pod := e.runPod(podCfg)
	cfg := e.ctrConfig("all", "grep -E 'Cap(Bnd|Eff)' /proc/self/status")
	cfg.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"ALL"}}
	out, st := e.output(pod, podCfg, cfg)
	if st.ExitCode != 0 {
		t.Fatalf("exit %d: %q", st.ExitCode, out)
	}
	own := ownCapBnd(t)
	for _, line := range strings.Split(out, "\n") {
		_, v, _ := strings.Cut(line, ":")
		got, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil || got != own {
			t.Fatalf("%q: want berth's bounding set %016x", line, own)
		}
	}

	// An explicit add of a capability berth lacks is refused up front.
	if own&(1<<24) == 0 { // CAP_SYS_RESOURCE
		cfg := e.ctrConfig("sys-resource", "true")
		cfg.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"SYS_RESOURCE"}}
		_, err := e.d.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "add_capabilities[0]") {
			t.Fatalf("add SYS_RESOURCE: %v, want InvalidArgument", err)
		}
	}
}

// ownCapBnd is this process's bounding set: the test runs as the root
// that started berth.
func ownCapBnd(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no CapBnd")
	return 0
}
