package spec

import (
	"fmt"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func (b *builder) resources(s *specs.Spec) error {
	// Beside pause's, under the pod's parent: in the cgroupsPath form of
	// the driver that makes it (a path, or slice:berth:<id>).
	s.Linux.CgroupsPath = b.in.Pod.CgroupParent.Child(b.in.ID).SpecPath()
	r := b.in.Config.GetLinux().GetResources()
	if r == nil {
		return nil
	}
	if err := Resources(s.Linux.Resources, r, b.in.Host.CgroupV2(), "linux.resources"); err != nil {
		return err
	}
	if !b.in.Host.Hugetlb() {
		// As CRI-O does: no controller, no limits (a cgroup v1 host where
		// hugetlb is not mounted would otherwise fail every container the
		// kubelet makes).
		s.Linux.Resources.HugepageLimits = nil
	}
	adj := int(r.GetOomScoreAdj())
	if adj < -1000 || adj > 1000 {
		return invalid("linux.resources.oom_score_adj", "%d is outside [-1000, 1000]", adj)
	}
	// Lowering it below berth's own needs CAP_SYS_RESOURCE, which berth may
	// not have: the closest allowed value is the honest answer.
	if own := b.in.Host.OwnOOMScoreAdj(); adj < own {
		adj = own
	}
	s.Process.OOMScoreAdj = &adj
	return nil
}

// Resources copies CRI resources into an OCI resources block (for create
// and for UpdateContainerResources). Zero values mean "not set".
func Resources(dst *specs.LinuxResources, r *runtimeapi.LinuxContainerResources, v2 bool, field string) error {
	cpu := &specs.LinuxCPU{}
	setCPU := false
	if v := r.GetCpuShares(); v != 0 {
		if v < 0 {
			return invalid(field+".cpu_shares", "%d is negative", v)
		}
		u := uint64(v)
		cpu.Shares, setCPU = &u, true
	}
	if v := r.GetCpuQuota(); v != 0 {
		cpu.Quota, setCPU = &v, true
	}
	if v := r.GetCpuPeriod(); v != 0 {
		if v < 0 {
			return invalid(field+".cpu_period", "%d is negative", v)
		}
		u := uint64(v)
		cpu.Period, setCPU = &u, true
	}
	if v := r.GetCpusetCpus(); v != "" {
		cpu.Cpus, setCPU = v, true
	}
	if v := r.GetCpusetMems(); v != "" {
		cpu.Mems, setCPU = v, true
	}
	if setCPU {
		dst.CPU = cpu
	}
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		if v < 0 {
			return invalid(field+".memory_limit_in_bytes", "%d is negative", v)
		}
		mem := &specs.LinuxMemory{Limit: &v}
		if sw := r.GetMemorySwapLimitInBytes(); sw != 0 {
			if sw < v && sw != -1 {
				return invalid(field+".memory_swap_limit_in_bytes", "%d is below the memory limit %d", sw, v)
			}
			mem.Swap = &sw
		} else if v2 {
			// No swap unless asked for, as containerd and CRI-O do: on v2
			// memory.swap.max defaults to max, and a container at its limit
			// would swap (slowly, for the whole node) instead of being
			// OOM-killed. runc writes memory.swap.max = swap - limit = 0,
			// and skips it where swap accounting is off. The kubelet's own
			// unified memory.swap.max, written last, still wins.
			mem.Swap = &v
		}
		dst.Memory = mem
	}
	dst.HugepageLimits = nil
	for i, h := range r.GetHugepageLimits() {
		if h.GetPageSize() == "" {
			return invalid(fmt.Sprintf("%s.hugepage_limits[%d].page_size", field, i), "empty")
		}
		dst.HugepageLimits = append(dst.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	if u := r.GetUnified(); len(u) > 0 {
		if !v2 {
			return invalid(field+".unified", "cgroup v2 (unified) settings on a cgroup v1 host")
		}
		dst.Unified = make(map[string]string, len(u))
		for k, v := range u {
			if strings.Contains(k, "/") {
				return invalid(field+".unified", "invalid key %q", k)
			}
			dst.Unified[k] = v
		}
	}
	return nil
}
