package container

import (
	"context"
	"os"
	"path/filepath"
	"sort"

	"github.com/opencontainers/cgroups"

	"github.com/berth-runtime/berth/internal/cgroup"
)

// watchSystemdReloads keeps the kubelet's unified map true across
// `systemctl daemon-reload` under the systemd driver on cgroup v2: a
// reload re-applies each scope's unit properties, and before systemd 253
// that writes memory.oom.group 0 over the kubelet's 1 (a scope has no
// OOMPolicy= there; Debian 12 and Ubuntu 22.04 ship such a systemd).
// After every reload the running containers' unified values are written
// again. Until then, for the reload's few milliseconds, an OOM kill in a
// container takes one process instead of all of them.
func (s *Service) watchSystemdReloads() {
	if !s.opts.CgroupDriver.UseSystemd() || !cgroups.IsCgroup2UnifiedMode() {
		return
	}
	go cgroup.WatchReloads(s.ctx, s.log, s.reassertUnified)
}

// reassertUnified writes each running container's unified map into its
// cgroup again, keys in order.
func (s *Service) reassertUnified(ctx context.Context) {
	s.mu.RLock()
	ctrs := make([]*ctr, 0, len(s.ctrs))
	for _, c := range s.ctrs {
		ctrs = append(ctrs, c)
	}
	s.mu.RUnlock()
	n := 0
	for _, c := range ctrs {
		c.mu.RLock()
		running := c.rec.State == StateRunning && !c.rec.Sandbox
		unified := c.resources.GetUnified()
		id := c.rec.ID
		c.mu.RUnlock()
		if !running || c.isExited() || len(unified) == 0 || ctx.Err() != nil {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", c.cgroupPath(s.opts.CgroupDriver))
		keys := make([]string, 0, len(unified))
		for k := range unified {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(k)), []byte(unified[k]), 0); err != nil {
				s.log.Warn("write the unified map again after systemd's reload", "container", id, "file", k, "error", err)
			}
		}
		n++
	}
	s.log.Debug("systemd reloaded: unified maps written again", "containers", n)
}
