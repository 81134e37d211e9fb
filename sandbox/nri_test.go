package sandbox

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestNRIPod(t *testing.T) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "u1", Attempt: 1},
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{"a": "b"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/pod1",
			Overhead:     &runtimeapi.LinuxContainerResources{CpuShares: 10},
			Resources:    &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20, CpuQuota: 5000, CpuPeriod: 100000},
		},
	}
	rec := &Record{ID: "p1", RuntimeHandler: "runc", CgroupPath: "/kubepods/pod1/p1", NetNS: "/run/berth/netns/p1", PausePid: 7, IPs: []string{"10.0.0.2"}}
	p := nriPod(rec, cfg)
	if p.Id != "p1" || p.Name != "web" || p.Namespace != "ns" || p.Uid != "u1" || p.RuntimeHandler != "runc" || p.Pid != 7 {
		t.Errorf("identity: %v", p)
	}
	if p.Labels["app"] != "web" || p.Annotations["a"] != "b" || len(p.Ips) != 1 || p.Ips[0] != "10.0.0.2" {
		t.Errorf("labels %v annotations %v ips %v", p.Labels, p.Annotations, p.Ips)
	}
	l := p.GetLinux()
	if l.GetCgroupParent() != "/kubepods/pod1" || l.GetCgroupsPath() != "/kubepods/pod1/p1" {
		t.Errorf("cgroups: %v", l)
	}
	if l.GetPodOverhead().GetCpu().GetShares().GetValue() != 10 || l.GetPodResources().GetMemory().GetLimit().GetValue() != 1<<20 ||
		l.GetPodResources().GetCpu().GetQuota().GetValue() != 5000 {
		t.Errorf("resources: %v %v", l.GetPodOverhead(), l.GetPodResources())
	}
	want := map[string]string{"network": "/run/berth/netns/p1", "ipc": "/proc/7/ns/ipc", "uts": "/proc/7/ns/uts", "pid": "/proc/7/ns/pid"}
	if len(l.GetNamespaces()) != len(want) {
		t.Errorf("namespaces: %v", l.GetNamespaces())
	}
	for _, ns := range l.GetNamespaces() {
		if want[ns.Type] != ns.Path {
			t.Errorf("namespace %s at %s, want %s", ns.Type, ns.Path, want[ns.Type])
		}
	}
	// Host network: no netns, and UTS is the host's.
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
	rec.NetNS = ""
	for _, ns := range nriPod(rec, cfg).GetLinux().GetNamespaces() {
		if ns.Type == "network" || ns.Type == "uts" {
			t.Errorf("host-network pod has its own %s namespace", ns.Type)
		}
	}
}
