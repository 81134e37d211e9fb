package sandbox

import (
	"context"
	"fmt"

	"github.com/opencontainers/cgroups"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateResources is UpdatePodSandboxResources: the pod's cgroup (the
// parent the kubelet named, holding pause and the containers) gets the
// sum of its containers' resources and the pod's overhead. The kubelet
// has resized that cgroup already; writing the same values again is
// harmless, and a cgroup changed behind its back is put right.
func (m *Manager) UpdateResources(ctx context.Context, id string, overhead, res *runtimeapi.LinuxContainerResources) error {
	p, err := m.lookup(id)
	if err != nil {
		return err
	}
	rec, cfg := p.snapshot()
	if cfg.GetLinux().GetCgroupParent() == "" || rec.CgroupPath == "" {
		// Berth's default parent is shared by every such pod.
		return fmt.Errorf("%w: pod sandbox %s has no cgroup of its own (no linux.cgroup_parent) to apply resources to", ErrInvalid, rec.ID)
	}
	if rec.State != StateReady {
		return fmt.Errorf("%w: pod sandbox %s is not ready", ErrInvalid, rec.ID)
	}
	if m.opts.NRI.Enabled() {
		if err := m.opts.NRI.UpdatePodSandbox(ctx, nriPod(&rec, cfg), nriResources(overhead), nriResources(res)); err != nil {
			return fmt.Errorf("pod %s: %w", rec.ID, err)
		}
	}
	r := podResources(overhead, res, cgroups.IsCgroup2UnifiedMode())
	pause, err := m.pauseCgroup(&rec, cfg)
	if err != nil {
		return fmt.Errorf("pod %s: %w", rec.ID, err)
	}
	parent := pause.Parent()
	// With systemd, through the slice's unit properties (then its files),
	// as the kubelet sets it.
	mgr, err := parent.Manager()
	if err == nil {
		err = mgr.Set(r)
	}
	if err != nil {
		return fmt.Errorf("pod %s: update cgroup %s: %w", rec.ID, parent.Path(), err)
	}
	m.log.Info("pod sandbox resources updated", "pod", rec.ID, "cgroup", parent.Path(),
		"cpu_shares", r.CpuShares, "cpu_quota", r.CpuQuota, "memory", r.Memory)
	if m.opts.NRI.Enabled() {
		m.opts.NRI.PostUpdatePodSandbox(ctx, nriPod(&rec, cfg))
	}
	return nil
}

// podResources adds the pod's overhead to its containers' sum. Zero means
// unset, and an unset limit (memory, quota) on either side is no limit.
func podResources(overhead, res *runtimeapi.LinuxContainerResources, v2 bool) *cgroups.Resources {
	r := &cgroups.Resources{
		// Device rules belong to the containers: never rewrite the pod's,
		// nor freeze it to (systemd's device rules), as the kubelet does.
		SkipDevices:     true,
		SkipFreezeOnSet: true,
		CpuShares:       uint64(res.GetCpuShares() + overhead.GetCpuShares()),
		CpusetCpus:      res.GetCpusetCpus(),
		CpusetMems:      res.GetCpusetMems(),
		Unified:         res.GetUnified(),
	}
	if res.GetCpuQuota() > 0 && (overhead == nil || overhead.GetCpuQuota() >= 0) {
		r.CpuPeriod = uint64(res.GetCpuPeriod())
		r.CpuQuota = res.GetCpuQuota() + max(overhead.GetCpuQuota(), 0)
	}
	if res.GetMemoryLimitInBytes() > 0 {
		r.Memory = res.GetMemoryLimitInBytes() + max(overhead.GetMemoryLimitInBytes(), 0)
	}
	sizes := map[string]uint64{}
	var order []string
	for _, list := range [][]*runtimeapi.HugepageLimit{res.GetHugepageLimits(), overhead.GetHugepageLimits()} {
		for _, h := range list {
			if _, ok := sizes[h.GetPageSize()]; !ok {
				order = append(order, h.GetPageSize())
			}
			sizes[h.GetPageSize()] += h.GetLimit()
		}
	}
	for _, size := range order {
		r.HugetlbLimit = append(r.HugetlbLimit, &cgroups.HugepageLimit{Pagesize: size, Limit: sizes[size]})
	}
	if v2 && r.CpuShares != 0 {
		r.CpuWeight = kubeletCPUWeight(r.CpuShares)
	}
	return r
}

// kubeletCPUWeight is the kubelet's own shares to cpu.weight conversion for
// the pod cgroups it manages (v1.37 cm.getCPUWeight, linear over [2, 262144]),
// not runc's quadratic one that containers get: the pod cgroup is the
// kubelet's, which reads cpu.weight back with the inverse of this formula to
// tell whether a resize is done. runc's value (100 for 1024 shares, where
// the kubelet writes 39) would leave the pod ~2.5 times its CPU share and
// a status that reports it.
func kubeletCPUWeight(shares uint64) uint64 {
	if shares >= 262144 {
		return 10000
	}
	shares = max(shares, 2)
	return 1 + (shares-2)*9999/262142
}
