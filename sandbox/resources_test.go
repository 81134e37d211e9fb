package sandbox

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodResources(t *testing.T) {
	tests := []struct {
		name          string
		overhead, res *runtimeapi.LinuxContainerResources
		v2            bool
		shares        uint64
		quota, memory int64
		weight        uint64
		hugepages     map[string]uint64
	}{
		{name: "containers only", res: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30},
			shares: 512, quota: 50000, memory: 1 << 30},
		{name: "overhead added", overhead: &runtimeapi.LinuxContainerResources{CpuShares: 100, CpuQuota: 10000, MemoryLimitInBytes: 64 << 20},
			res:    &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30},
			shares: 612, quota: 60000, memory: 1<<30 + 64<<20},
		{name: "no limit stays no limit", overhead: &runtimeapi.LinuxContainerResources{CpuQuota: 10000, MemoryLimitInBytes: 64 << 20},
			res: &runtimeapi.LinuxContainerResources{CpuShares: 2}, shares: 2},
		// The kubelet's linear conversion, as it writes and reads the pod
		// cgroup back (runc's quadratic one gives 100 for 1024).
		{name: "v2 weight, the kubelet's", res: &runtimeapi.LinuxContainerResources{CpuShares: 1024}, v2: true, shares: 1024, weight: 39},
		{name: "v2 weight, least", res: &runtimeapi.LinuxContainerResources{CpuShares: 2}, v2: true, shares: 2, weight: 1},
		{name: "v2 weight, most", res: &runtimeapi.LinuxContainerResources{CpuShares: 300000}, v2: true, shares: 300000, weight: 10000},
		{name: "v2 weight, 100m", res: &runtimeapi.LinuxContainerResources{CpuShares: 102}, v2: true, shares: 102, weight: 4},
		{name: "hugepages summed by size",
			overhead:  &runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 2 << 20}}},
			res:       &runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}, {PageSize: "1GB", Limit: 1 << 30}}},
			hugepages: map[string]uint64{"2MB": 6 << 20, "1GB": 1 << 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := podResources(tt.overhead, tt.res, tt.v2)
			if !r.SkipDevices || r.CpuShares != tt.shares || r.CpuQuota != tt.quota || r.Memory != tt.memory || r.CpuWeight != tt.weight {
				t.Fatalf("got %+v", r)
			}
			if len(r.HugetlbLimit) != len(tt.hugepages) {
				t.Fatalf("hugepages %v", r.HugetlbLimit)
			}
			for _, h := range r.HugetlbLimit {
				if tt.hugepages[h.Pagesize] != h.Limit {
					t.Fatalf("hugepage %s: %d", h.Pagesize, h.Limit)
				}
			}
		})
	}
}
