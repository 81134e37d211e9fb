package systemd

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// memoryHog doubles a shell variable until the cgroup's limit kills it.
const memoryHog = "x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done"

// runLimited creates and starts a container with resources res (nil: none).
func (e *env) runLimited(pod string, podCfg *runtimeapi.PodSandboxConfig, name, script string, res *runtimeapi.LinuxContainerResources) string {
	e.t.Helper()
	ctx := framework.Ctx(e.t)
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: e.image},
		Command:  []string{"sh", "-c", script},
		LogPath:  name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: res,
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	resp, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		e.t.Fatalf("CreateContainer %s: %v", name, err)
	}
	e.ids = append(e.ids, resp.ContainerId)
	if _, err := e.d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
		e.t.Fatalf("StartContainer %s: %v", name, err)
	}
	return resp.ContainerId
}

func (e *env) waitExited(id string, within time.Duration) *runtimeapi.ContainerStatus {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s, err := e.d.Runtime.ContainerStatus(framework.Ctx(e.t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			e.t.Fatal(err)
		}
		if s.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return s.Status
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("container %s did not exit in %s", id, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOOMKilledEveryTime: a container killed by its memory limit under the
// systemd driver ends OOMKilled with code 137, every time. systemd removes
// an empty scope's cgroup the moment it empties, so a runtime that reads
// memory.events only after the container's init died can find nothing
// there and say Error (cri-o/cri-o#7035). BERTH_OOM_REPEAT sets the count
// (default 10); the kubelet's multi-process case (memory.oom.group, a
// forked hog) is every other round.
func TestOOMKilledEveryTime(t *testing.T) {
	if !cgroups.IsCgroup2UnifiedMode() {
		t.Skip("memory.oom.group and the scope race are cgroup v2's")
	}
	e := newEnv(t)
	n := 10
	if v, err := strconv.Atoi(os.Getenv("BERTH_OOM_REPEAT")); err == nil && v > 0 {
		n = v
	}
	pod, podCfg := e.runPod("oom", e.slice)
	for i := range n {
		res := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}
		script := memoryHog
		if i%2 == 1 {
			res.Unified = map[string]string{"memory.oom.group": "1"}
			script = "(" + memoryHog + ") & " + memoryHog
		}
		id := e.runLimited(pod, podCfg, "hog"+strconv.Itoa(i), script, res)
		st := e.waitExited(id, 60*time.Second)
		if st.Reason != "OOMKilled" || st.ExitCode != 137 {
			t.Errorf("round %d (%v): reason %q code %d, want OOMKilled 137", i, res.Unified, st.Reason, st.ExitCode)
		}
		if _, err := e.d.Runtime.RemoveContainer(framework.Ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
	}
	e.removePod(pod)
}

// TestKubeletUnifiedMap: the unified map the v1.37 kubelet sends with
// every container on v2 (memory.oom.group, MemoryQoS's memory.min and
// memory.low, memory.swap.max) lands in the scope's files, survives an
// update with the same map and a systemctl daemon-reload (which re-applies
// every unit's properties), and the container keeps running.
func TestKubeletUnifiedMap(t *testing.T) {
	if !cgroups.IsCgroup2UnifiedMode() {
		t.Skip("unified is cgroup v2's")
	}
	e := newEnv(t)
	pod, podCfg := e.runPod("unified", e.slice)
	unified := map[string]string{"memory.oom.group": "1", "memory.min": "0", "memory.low": "0", "memory.swap.max": "0"}
	res := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, Unified: unified}
	id := e.runLimited(pod, podCfg, "kubelet-like", "sleep 1000", res)
	path := e.scope(id, e.slice, e.containerPid(id))
	check := func(when string) {
		t.Helper()
		for file, want := range unified {
			b, err := os.ReadFile(e.cgroupFile(path, "memory", file))
			if got := strings.TrimSpace(string(b)); err != nil || got != want {
				t.Errorf("%s: %s = %q (%v), want %q", when, file, got, err, want)
			}
		}
	}
	check("after create")
	if _, err := e.d.Runtime.UpdateContainerResources(framework.Ctx(t), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: res}); err != nil {
		t.Fatalf("update with the same map: %v", err)
	}
	check("after update")
	if out, err := exec.Command("systemctl", "daemon-reload").CombinedOutput(); err != nil {
		t.Fatalf("systemctl daemon-reload: %v: %s", err, out)
	}
	// Before 253 a reload writes memory.oom.group 0 over the kubelet's 1
	// (a scope has no OOMPolicy=): berth writes the map again once the
	// reload is done, so allow it a moment.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(e.cgroupFile(path, "memory", "memory.oom.group")); strings.TrimSpace(string(b)) == "1" {
			break
		}
	}
	t.Logf("systemd %d", e.systemdVersion())
	check("after systemctl daemon-reload")
	s, err := e.d.Runtime.ContainerStatus(framework.Ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil || s.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after the updates: %v %v", s.GetStatus().GetState(), err)
	}
	e.removePod(pod)
}

// systemdVersion is the major version of the systemd that answers.
func (e *env) systemdVersion() int {
	e.t.Helper()
	v, err := e.sd.GetManagerProperty("Version")
	if err != nil {
		e.t.Fatal(err)
	}
	major, _, _ := strings.Cut(strings.Trim(v, `"`), ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		e.t.Fatalf("systemd version %q", v)
	}
	return n
}
