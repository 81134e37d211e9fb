package monitord

import specs "github.com/opencontainers/runtime-spec/specs-go"

// specFacts are what the monitor acts on of a container's spec. Decoding
// them allocates a fraction of what the whole spec does, and they are
// all a container keeps of it for its life.
type specFacts struct {
	Process *struct {
		Terminal bool `json:"terminal"`
	} `json:"process"`
	Hooks *struct {
		Poststop []struct{} `json:"poststop"`
	} `json:"hooks"`
	Linux *struct {
		Namespaces []specs.LinuxNamespace `json:"namespaces"`
		IntelRdt   *struct{}              `json:"intelRdt"`
	} `json:"linux"`
}

// hostPID tells whether the container runs in the host's PID namespace:
// the processes it leaves behind are then reparented to the monitor,
// which has to reap them.
func (f *specFacts) hostPID() bool {
	if f.Linux == nil {
		return true
	}
	for _, ns := range f.Linux.Namespaces {
		if ns.Type == specs.PIDNamespace {
			return false
		}
	}
	return true
}

// plainDestroy tells whether destroying the exited container is only
// removing directories: it had a PID namespace of its own (the kernel
// killed whatever was left when its init died), no poststop hook is to
// run, and no Intel RDT group is to remove.
func (f *specFacts) plainDestroy() bool {
	if f.Linux == nil || f.Linux.IntelRdt != nil || (f.Hooks != nil && len(f.Hooks.Poststop) > 0) {
		return false
	}
	for _, ns := range f.Linux.Namespaces {
		if ns.Type == specs.PIDNamespace {
			return ns.Path == ""
		}
	}
	return false
}
