package sandbox

import (
	"path"

	"github.com/berth-runtime/berth/stats"
)

// StatsPods describes every pod for the stats collector, from memory.
func (m *Manager) StatsPods() []stats.Pod {
	m.mu.RLock()
	pods := make([]*pod, 0, len(m.pods))
	for _, p := range m.pods {
		pods = append(pods, p)
	}
	m.mu.RUnlock()
	out := make([]stats.Pod, 0, len(pods))
	for _, p := range pods {
		rec, cfg := p.snapshot()
		if rec.State == StateCreating || cfg == nil {
			continue
		}
		sp := stats.Pod{
			ID: rec.ID, Metadata: cfg.GetMetadata(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
			Ready: rec.State == StateReady, PauseCgroup: rec.CgroupPath,
		}
		// Pause's cgroup is a child of the parent the kubelet named: that
		// parent is the pod's own cgroup, holding pause and the
		// containers. Berth's default parent is shared by many pods.
		if cfg.GetLinux().GetCgroupParent() != "" && rec.CgroupPath != "" {
			sp.Cgroup = path.Dir(rec.CgroupPath)
		}
		if hostNet, _, _ := namespaces(cfg); !hostNet && sp.Ready {
			sp.NetNS = rec.NetNS
		}
		out = append(out, sp)
	}
	return out
}
