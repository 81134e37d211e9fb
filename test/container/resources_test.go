package container_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

func TestResources(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("res")
	pod := e.runPod(podCfg)

	cfg := e.ctrConfig("oom", "x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}
	id := e.run(pod, podCfg, cfg)
	st := e.waitExit(id, 30*time.Second)
	if st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Fatalf("memory hog: reason %q code %d", st.Reason, st.ExitCode)
	}

	cfg = e.ctrConfig("cpu", "sleep 1000")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20}
	id = e.run(pod, podCfg, cfg)
	// The container's cgroup is a sibling of pause's, under the pod's
	// parent, where the kubelet's cAdvisor looks for it.
	cg := filepath.Join(e.parent, id)
	if q, s := cpuQuota(t, cg), framework.ReadCgroupFile(cg, "cpu", "cpu.shares", "cpu.weight"); q != "20000" || s != cpuSharesValue(512) {
		t.Fatalf("cpu cgroup: quota %s shares (or weight) %s", q, s)
	}
	_, err := e.d.Runtime.UpdateContainerResources(framework.Ctx(t), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if q := cpuQuota(t, cg); q != "50000" {
		t.Fatalf("quota after update %s", q)
	}
	if r := e.status(id).GetResources().GetLinux(); r.GetCpuQuota() != 50000 || r.GetMemoryLimitInBytes() != 128<<20 {
		t.Fatalf("status resources after update %v", r)
	}
}

// cpuQuota reads a cgroup's CFS quota: cpu.cfs_quota_us on v1, the first
// field of cpu.max on v2.
func cpuQuota(t *testing.T, cg string) string {
	t.Helper()
	q := framework.ReadCgroupFile(cg, "cpu", "cpu.cfs_quota_us", "cpu.max")
	if q == "" {
		t.Fatalf("no CPU quota file for cgroup %s", cg)
	}
	return strings.Fields(q)[0]
}

// cpuSharesValue is what a container's cgroup holds for CRI cpu_shares:
// the shares on v1, runc's conversion to cpu.weight on v2.
func cpuSharesValue(shares uint64) string {
	if framework.CgroupV2() {
		return fmt.Sprint(cgroups.ConvertCPUSharesToCgroupV2Value(shares))
	}
	return fmt.Sprint(shares)
}

// TestPodCgroupAsTheKubeletWritesIt: UpdatePodSandboxResources writes the
// pod's cgroup with the values the kubelet itself writes there, so that
// the kubelet, which reads them back to tell whether a resize is done,
// agrees with it: on v2, cpu.weight by the kubelet's linear conversion (39
// for 1024 shares), not runc's (100, about 2.5 times the pod's share).
func TestPodCgroupAsTheKubeletWritesIt(t *testing.T) {
	e := newEnv(t)
	cfg := e.podConfig("podres")
	cg := e.parent + "/podres"
	cfg.Linux.CgroupParent = cg
	pod := e.runPod(cfg)
	_, err := e.d.Runtime.UpdatePodSandboxResources(framework.Ctx(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: pod,
		Resources:    &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 100000, CpuPeriod: 100000, MemoryLimitInBytes: 256 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantShares := "1024"
	if framework.CgroupV2() {
		wantShares = "39"
	}
	if got := framework.ReadCgroupFile(cg, "cpu", "cpu.shares", "cpu.weight"); got != wantShares {
		t.Errorf("pod cgroup's CPU shares (or weight) %q, want the kubelet's %s", got, wantShares)
	}
	if got := cpuQuota(t, cg); got != "100000" {
		t.Errorf("pod cgroup's CPU quota %s, want 100000", got)
	}
	if got := framework.ReadCgroupFile(cg, "memory", "memory.limit_in_bytes", "memory.max"); got != fmt.Sprint(256<<20) {
		t.Errorf("pod cgroup's memory limit %s, want %d", got, 256<<20)
	}
}

// TestPrivilegedCgroupNamespace: on v2 an unprivileged container is in a
// cgroup namespace of its own (its /proc/self/cgroup says 0::/, its
// /sys/fs/cgroup is its own cgroup, where the kubelet's resize checks read
// cpu.max), and a privileged one is in the host's, as containerd and
// CRI-O keep it (its /proc/self/cgroup names its cgroup's full path).
func TestPrivilegedCgroupNamespace(t *testing.T) {
	if !framework.CgroupV2() {
		t.Skip("cgroup namespaces are given on cgroup v2 only")
	}
	e := newEnv(t)
	podCfg := e.podConfig("cgns")
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
	pod := e.runPod(podCfg)
	script := "cat /proc/self/cgroup; cat /sys/fs/cgroup/cpu.max; sleep 1000"
	plain := e.ctrConfig("plain", script)
	plain.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuQuota: 30000, CpuPeriod: 100000}
	priv := e.ctrConfig("priv", script)
	priv.Linux.SecurityContext.Privileged = true
	ids := map[string]string{"plain": e.run(pod, podCfg, plain), "priv": e.run(pod, podCfg, priv)}
	want := map[string]string{
		"plain": "0::/\n30000 100000",
		"priv":  "0::" + filepath.Join(e.parent, ids["priv"]) + "\n",
	}
	for name, id := range ids {
		var out string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if out = logText(t, e.status(id).GetLogPath()); strings.Count(out, "\n") >= 2 {
				break
			}
		}
		if !strings.Contains(out, want[name]) {
			t.Errorf("%s container (%s) printed %q, want %q in it", name, id, out, want[name])
		}
	}
}
