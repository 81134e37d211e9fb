package container_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", e.parent, id, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if q, s := read("cpu.cfs_quota_us"), read("cpu.shares"); q != "20000" || s != "512" {
		t.Fatalf("cpu cgroup: quota %s shares %s", q, s)
	}
	_, err := e.d.Runtime.UpdateContainerResources(framework.Ctx(t), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if q := read("cpu.cfs_quota_us"); q != "50000" {
		t.Fatalf("quota after update %s", q)
	}
	if r := e.status(id).GetResources().GetLinux(); r.GetCpuQuota() != 50000 || r.GetMemoryLimitInBytes() != 128<<20 {
		t.Fatalf("status resources after update %v", r)
	}
}
