package sandbox

import (
	"context"
	"strconv"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// NRI: the pod side of berth's NRI support (package nri). The hooks are
// called from run.go, stop.go, remove.go and resources.go; this file
// describes pods to plugins.

// nriPod describes a pod to NRI plugins.
func nriPod(rec *Record, cfg *runtimeapi.PodSandboxConfig) *api.PodSandbox {
	md := cfg.GetMetadata()
	p := &api.PodSandbox{
		Id:             rec.ID,
		Name:           md.GetName(),
		Uid:            md.GetUid(),
		Namespace:      md.GetNamespace(),
		Labels:         cfg.GetLabels(),
		Annotations:    cfg.GetAnnotations(),
		RuntimeHandler: rec.RuntimeHandler,
		Pid:            uint32(rec.PausePid),
		Ips:            append([]string(nil), rec.IPs...),
		Linux: &api.LinuxPodSandbox{
			PodOverhead:  nriResources(cfg.GetLinux().GetOverhead()),
			PodResources: nriResources(cfg.GetLinux().GetResources()),
			CgroupParent: cfg.GetLinux().GetCgroupParent(),
			CgroupsPath:  rec.CgroupPath,
			Namespaces:   nriNamespaces(rec, cfg),
		},
	}
	return p
}

// nriNamespaces are the pod's namespaces: the pinned netns, and pause's
// own for the others it was given.
func nriNamespaces(rec *Record, cfg *runtimeapi.PodSandboxConfig) []*api.LinuxNamespace {
	hostNet, hostPID, hostIPC := namespaces(cfg)
	var out []*api.LinuxNamespace
	if !hostNet && rec.NetNS != "" {
		out = append(out, &api.LinuxNamespace{Type: "network", Path: rec.NetNS})
	}
	if rec.PausePid > 0 {
		proc := "/proc/" + strconv.Itoa(rec.PausePid) + "/ns/"
		if !hostIPC {
			out = append(out, &api.LinuxNamespace{Type: "ipc", Path: proc + "ipc"})
		}
		if !hostNet {
			out = append(out, &api.LinuxNamespace{Type: "uts", Path: proc + "uts"})
		}
		if !hostPID {
			out = append(out, &api.LinuxNamespace{Type: "pid", Path: proc + "pid"})
		}
	}
	return out
}

// nriResources is NRI's view of CRI resources.
func nriResources(r *runtimeapi.LinuxContainerResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	out := &api.LinuxResources{
		Cpu:    &api.LinuxCPU{Cpus: r.GetCpusetCpus(), Mems: r.GetCpusetMems()},
		Memory: &api.LinuxMemory{},
	}
	if v := r.GetCpuShares(); v > 0 {
		out.Cpu.Shares = api.UInt64(uint64(v))
	}
	if v := r.GetCpuQuota(); v != 0 {
		out.Cpu.Quota = api.Int64(v)
	}
	if v := r.GetCpuPeriod(); v > 0 {
		out.Cpu.Period = api.UInt64(uint64(v))
	}
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		out.Memory.Limit = api.Int64(v)
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		out.Memory.Swap = api.Int64(v)
	}
	for _, h := range r.GetHugepageLimits() {
		out.HugepageLimits = append(out.HugepageLimits, &api.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	if u := r.GetUnified(); len(u) > 0 {
		out.Unified = make(map[string]string, len(u))
		for k, v := range u {
			out.Unified[k] = v
		}
	}
	return out
}

// nriDescribe describes p as it is now.
func (p *pod) nriDescribe() *api.PodSandbox {
	rec, cfg := p.snapshot()
	return nriPod(&rec, cfg)
}

// nriRun tells NRI plugins of a new pod (no-op without NRI).
func (m *Manager) nriRun(ctx context.Context, p *pod) error {
	if !m.opts.NRI.Enabled() {
		return nil
	}
	return m.opts.NRI.RunPodSandbox(ctx, p.nriDescribe())
}

// nriStop tells NRI plugins a pod stops (once; no-op without NRI).
func (m *Manager) nriStop(ctx context.Context, p *pod) {
	if m.opts.NRI.Enabled() {
		m.opts.NRI.StopPodSandbox(ctx, p.nriDescribe())
	}
}

// NRIPods lists every pod, for NRI plugins' Synchronize.
func (m *Manager) NRIPods() []*api.PodSandbox {
	m.mu.RLock()
	list := make([]*pod, 0, len(m.pods))
	for _, p := range m.pods {
		list = append(list, p)
	}
	m.mu.RUnlock()
	out := make([]*api.PodSandbox, 0, len(list))
	for _, p := range list {
		out = append(out, p.nriDescribe())
	}
	return out
}

// NRIPod describes one pod (by full id) for NRI; nil if unknown.
func (m *Manager) NRIPod(id string) *api.PodSandbox {
	m.mu.RLock()
	p, ok := m.pods[id]
	m.mu.RUnlock()
	if !ok {
		return nil
	}
	return p.nriDescribe()
}
