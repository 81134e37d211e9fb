package nri

import (
	"fmt"
	"slices"

	"github.com/containerd/nri/pkg/api"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// MergeResources returns the resources of a running container after a
// plugin's update u: a ContainerUpdate carries only the fields the plugin
// changes, every other one keeps its current value. Pids is set only when
// u sets it. A memory limit raised above the swap limit takes the swap
// limit with it (swap equal to the limit means no swap, as the kubelet
// sets it). Block I/O and RDT classes cannot change on a running
// container here.
func MergeResources(cur *rspec.LinuxResources, u *api.LinuxResources, cgroupV2 bool) (*rspec.LinuxResources, error) {
	out := &rspec.LinuxResources{}
	if cur != nil {
		c := *cur
		out = &c
		if cur.CPU != nil {
			cpu := *cur.CPU
			out.CPU = &cpu
		}
		if cur.Memory != nil {
			mem := *cur.Memory
			out.Memory = &mem
		}
		out.HugepageLimits = slices.Clone(cur.HugepageLimits)
		out.Devices = slices.Clone(cur.Devices)
		if cur.Unified != nil {
			out.Unified = make(map[string]string, len(cur.Unified))
			for k, v := range cur.Unified {
				out.Unified[k] = v
			}
		}
	}
	out.Pids = nil
	if u == nil {
		return out, nil
	}
	if c := u.Cpu; c != nil {
		if out.CPU == nil {
			out.CPU = &rspec.LinuxCPU{}
		}
		setIf(&out.CPU.Shares, c.Shares.Get())
		setIf(&out.CPU.Quota, c.Quota.Get())
		setIf(&out.CPU.Period, c.Period.Get())
		setIf(&out.CPU.RealtimeRuntime, c.RealtimeRuntime.Get())
		setIf(&out.CPU.RealtimePeriod, c.RealtimePeriod.Get())
		if c.Cpus != "" {
			out.CPU.Cpus = c.Cpus
		}
		if c.Mems != "" {
			out.CPU.Mems = c.Mems
		}
	}
	if m := u.Memory; m != nil {
		if out.Memory == nil {
			out.Memory = &rspec.LinuxMemory{}
		}
		old := out.Memory.Limit
		setIf(&out.Memory.Limit, m.Limit.Get())
		setIf(&out.Memory.Reservation, m.Reservation.Get())
		setIf(&out.Memory.Swap, m.Swap.Get())
		setIf(&out.Memory.Kernel, m.Kernel.Get()) //nolint:staticcheck // as NRI sends it
		setIf(&out.Memory.KernelTCP, m.KernelTcp.Get())
		setIf(&out.Memory.Swappiness, m.Swappiness.Get())
		setIf(&out.Memory.DisableOOMKiller, m.DisableOomKiller.Get())
		setIf(&out.Memory.UseHierarchy, m.UseHierarchy.Get())
		if l, sw := out.Memory.Limit, out.Memory.Swap; m.Swap == nil && l != nil && sw != nil && *sw != -1 &&
			(*sw < *l || (old != nil && *sw == *old)) {
			v := *l
			out.Memory.Swap = &v
		}
	}
	for _, h := range u.HugepageLimits {
		i := slices.IndexFunc(out.HugepageLimits, func(x rspec.LinuxHugepageLimit) bool { return x.Pagesize == h.PageSize })
		if i < 0 {
			out.HugepageLimits = append(out.HugepageLimits, rspec.LinuxHugepageLimit{Pagesize: h.PageSize, Limit: h.Limit})
		} else {
			out.HugepageLimits[i].Limit = h.Limit
		}
	}
	if len(u.Unified) > 0 {
		if !cgroupV2 {
			return nil, unifiedOnV1(u.Unified)
		}
		if out.Unified == nil {
			out.Unified = map[string]string{}
		}
		for k, v := range u.Unified {
			out.Unified[k] = v
		}
	}
	if p := u.Pids; p != nil {
		out.Pids = &rspec.LinuxPids{}
		if p.Limit > api.UnlimitedPidsLimit {
			l := p.Limit
			out.Pids.Limit = &l
		}
	}
	if len(u.Devices) > 0 {
		return nil, fmt.Errorf("device cgroup rules cannot change on a running container: %w", ErrUnsupported)
	}
	if c := u.BlockioClass.Get(); c != nil {
		return nil, fmt.Errorf("block I/O class %q: %w", *c, ErrUnsupported)
	}
	if c := u.RdtClass.Get(); c != nil {
		return nil, fmt.Errorf("RDT class %q of a running container: %w", *c, ErrUnsupported)
	}
	return out, nil
}

func setIf[T any](dst **T, v *T) {
	if v != nil {
		x := *v
		*dst = &x
	}
}
