package container

import (
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/stats"
)

// StatsContainers describes every container for the stats collector,
// from memory.
func (s *Service) StatsContainers() []stats.Container {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]stats.Container, 0, len(s.ctrs))
	for _, c := range s.ctrs {
		cg := c.cgroupPath(s.opts.CgroupDriver)
		c.mu.RLock()
		r := &c.rec
		if r.State != StateCreating && !r.Sandbox {
			out = append(out, stats.Container{
				ID: r.ID, PodID: r.PodID, Metadata: c.cfg.GetMetadata(),
				Labels: c.cfg.GetLabels(), Annotations: c.cfg.GetAnnotations(),
				Image:         c.cfg.GetImage().GetImage(),
				Cgroup:        cg,
				WritableLayer: filepath.Join(r.Upper, "upper"),
				Running:       r.State == StateRunning && !c.isExited(),
				StartedAt:     unixNanoTime(r.StartedAt),
			})
		}
		c.mu.RUnlock()
	}
	return out
}

// cgroupPath is the container's cgroup relative to the hierarchies' root,
// where its OCI spec placed it (in driver's form); the spec is parsed once.
func (c *ctr) cgroupPath(driver cgroup.Driver) string {
	c.cgroupOnce.Do(func() {
		var sp struct {
			Linux struct {
				CgroupsPath string `json:"cgroupsPath"`
			} `json:"linux"`
		}
		if json.Unmarshal(c.spec, &sp) != nil {
			return
		}
		if cg, err := driver.FromSpec(sp.Linux.CgroupsPath); err == nil {
			c.cgroup = cg.Path()
		}
	})
	return c.cgroup
}

func unixNanoTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
