package nri

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/runtime-tools/generate"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// Host is what an adjustment must respect of this machine.
type Host struct {
	// CgroupV2: containers get a unified hierarchy; unified resource
	// settings are refused otherwise.
	CgroupV2 bool
	// MinOOMScoreAdj is berth's own oom_score_adj: a container cannot go
	// lower without CAP_SYS_RESOURCE, so a lower value is raised to it,
	// as for the CRI's.
	MinOOMScoreAdj int
}

// ErrUnsupported is an adjustment berth cannot make (CDI devices, block
// I/O classes).
var ErrUnsupported = errors.New("not supported by berth")

// AdjustSpec applies the plugins' combined adjustment of a container to
// its OCI spec, before the spec is written and the container created:
// annotations, environment, arguments, hooks, devices (nodes and cgroup
// rules), cgroups path, OOM score, I/O priority, scheduler, seccomp
// policy, namespaces, sysctls, network devices, memory policy, resources
// (CPU, memory, hugepages, unified, pids, device rules), RDT, mounts and
// rlimits. The adjustment itself is the NRI library's (package
// runtime-tools/generate), as in containerd and CRI-O.
func AdjustSpec(s *rspec.Spec, adj *api.ContainerAdjustment, h Host) error {
	if adj == nil {
		return nil
	}
	if s.Process == nil {
		s.Process = &rspec.Process{}
	}
	if s.Linux == nil {
		s.Linux = &rspec.Linux{}
	}
	g := generate.SpecGenerator(specGen{s},
		generate.WithResourceChecker(func(r *rspec.LinuxResources) error {
			if r != nil && len(r.Unified) > 0 && !h.CgroupV2 {
				return unifiedOnV1(r.Unified)
			}
			return nil
		}),
		generate.WithBlockIOResolver(func(class string) (*rspec.LinuxBlockIO, error) {
			return nil, fmt.Errorf("block I/O class %q: %w", class, ErrUnsupported)
		}),
		// As containerd: the class names the resctrl group (CLOS).
		generate.WithRdtResolver(func(class string) (*rspec.LinuxIntelRdt, error) {
			return &rspec.LinuxIntelRdt{ClosID: class}, nil
		}),
		generate.WithCDIDeviceInjector(func(_ *rspec.Spec, devices []string) error {
			return fmt.Errorf("CDI devices %v: %w", devices, ErrUnsupported)
		}),
	)
	if err := g.Adjust(adj); err != nil {
		return fmt.Errorf("NRI adjustment: %w", err)
	}
	s.Process.Rlimits = lastRlimits(s.Process.Rlimits)
	if p := s.Process.OOMScoreAdj; p != nil && *p < h.MinOOMScoreAdj {
		v := h.MinOOMScoreAdj
		s.Process.OOMScoreAdj = &v
	}
	return nil
}

// lastRlimits keeps one limit per resource, the last given: the library
// appends a plugin's rlimit after the one the spec may already have, and
// the first would win.
func lastRlimits(rl []rspec.POSIXRlimit) []rspec.POSIXRlimit {
	var out []rspec.POSIXRlimit
	for i, r := range rl {
		if slices.ContainsFunc(rl[i+1:], func(x rspec.POSIXRlimit) bool { return x.Type == r.Type }) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// unifiedOnV1 refuses cgroup v2 settings on a cgroup v1 host.
func unifiedOnV1(u map[string]string) error {
	return fmt.Errorf("unified cgroup settings %v on a cgroup v1 host", slices.Collect(maps.Keys(u)))
}
