package nri

import (
	"fmt"
	"slices"
	"strings"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// specGen edits an OCI spec in place for the NRI library's adjustment code
// (generate.UnderlyingGenerator, the subset of runtime-tools' generator
// that NRI uses), without pulling in runtime-tools.
type specGen struct{ s *rspec.Spec }

func (g specGen) Spec() *rspec.Spec { return g.s }

func (g specGen) process() *rspec.Process {
	if g.s.Process == nil {
		g.s.Process = &rspec.Process{}
	}
	return g.s.Process
}

func (g specGen) linux() *rspec.Linux {
	if g.s.Linux == nil {
		g.s.Linux = &rspec.Linux{}
	}
	return g.s.Linux
}

func (g specGen) resources() *rspec.LinuxResources {
	l := g.linux()
	if l.Resources == nil {
		l.Resources = &rspec.LinuxResources{}
	}
	return l.Resources
}

func (g specGen) cpu() *rspec.LinuxCPU {
	r := g.resources()
	if r.CPU == nil {
		r.CPU = &rspec.LinuxCPU{}
	}
	return r.CPU
}

func (g specGen) memory() *rspec.LinuxMemory {
	r := g.resources()
	if r.Memory == nil {
		r.Memory = &rspec.LinuxMemory{}
	}
	return r.Memory
}

func (g specGen) hooks() *rspec.Hooks {
	if g.s.Hooks == nil {
		g.s.Hooks = &rspec.Hooks{}
	}
	return g.s.Hooks
}

func (g specGen) AddAnnotation(key, value string) {
	if g.s.Annotations == nil {
		g.s.Annotations = map[string]string{}
	}
	g.s.Annotations[key] = value
}

func (g specGen) RemoveAnnotation(key string) { delete(g.s.Annotations, key) }

// AddDevice adds a device node, replacing one at the same path.
func (g specGen) AddDevice(d rspec.LinuxDevice) {
	l := g.linux()
	for i := range l.Devices {
		if l.Devices[i].Path == d.Path {
			l.Devices[i] = d
			return
		}
	}
	l.Devices = append(l.Devices, d)
}

func (g specGen) RemoveDevice(path string) {
	if g.s.Linux == nil {
		return
	}
	g.s.Linux.Devices = slices.DeleteFunc(g.s.Linux.Devices, func(d rspec.LinuxDevice) bool { return d.Path == path })
}

// namespaceTypes are the namespace names a plugin may use: the OCI ones,
// and the short names of /proc/<pid>/ns.
var namespaceTypes = map[string]rspec.LinuxNamespaceType{
	"pid": rspec.PIDNamespace, "network": rspec.NetworkNamespace, "net": rspec.NetworkNamespace,
	"mount": rspec.MountNamespace, "mnt": rspec.MountNamespace, "ipc": rspec.IPCNamespace,
	"uts": rspec.UTSNamespace, "user": rspec.UserNamespace, "cgroup": rspec.CgroupNamespace,
	"time": rspec.TimeNamespace,
}

func namespaceType(name string) (rspec.LinuxNamespaceType, error) {
	t, ok := namespaceTypes[name]
	if !ok {
		return "", fmt.Errorf("unknown namespace type %q", name)
	}
	return t, nil
}

// AddOrReplaceLinuxNamespace joins the namespace at path (a new one for an
// empty path) instead of the one the spec had of that type.
func (g specGen) AddOrReplaceLinuxNamespace(name, path string) error {
	t, err := namespaceType(name)
	if err != nil {
		return err
	}
	l := g.linux()
	for i := range l.Namespaces {
		if l.Namespaces[i].Type == t {
			l.Namespaces[i].Path = path
			return nil
		}
	}
	l.Namespaces = append(l.Namespaces, rspec.LinuxNamespace{Type: t, Path: path})
	return nil
}

func (g specGen) RemoveLinuxNamespace(name string) error {
	t, err := namespaceType(name)
	if err != nil {
		return err
	}
	if g.s.Linux != nil {
		g.s.Linux.Namespaces = slices.DeleteFunc(g.s.Linux.Namespaces, func(n rspec.LinuxNamespace) bool { return n.Type == t })
	}
	return nil
}

func (g specGen) AddPreStartHook(h rspec.Hook) {
	g.hooks().Prestart = append(g.hooks().Prestart, h) //nolint:staticcheck // NRI still sends prestart hooks
}
func (g specGen) AddPostStartHook(h rspec.Hook) { g.hooks().Poststart = append(g.hooks().Poststart, h) }
func (g specGen) AddPostStopHook(h rspec.Hook)  { g.hooks().Poststop = append(g.hooks().Poststop, h) }

// AddProcessEnv sets a variable, in place if it is already set.
func (g specGen) AddProcessEnv(name, value string) {
	if name == "" {
		return
	}
	p := g.process()
	kv := name + "=" + value
	for i, e := range p.Env {
		if k, _, _ := strings.Cut(e, "="); k == name {
			p.Env[i] = kv
			return
		}
	}
	p.Env = append(p.Env, kv)
}

func (g specGen) ClearProcessEnv() {
	if g.s.Process != nil {
		g.s.Process.Env = nil
	}
}

func (g specGen) SetProcessArgs(args []string) { g.process().Args = slices.Clone(args) }

func (g specGen) SetProcessOOMScoreAdj(adj int) { g.process().OOMScoreAdj = &adj }

func (g specGen) AddMount(m rspec.Mount) { g.s.Mounts = append(g.s.Mounts, m) }

// RemoveMount removes every mount onto dest.
func (g specGen) RemoveMount(dest string) {
	g.s.Mounts = slices.DeleteFunc(g.s.Mounts, func(m rspec.Mount) bool { return m.Destination == dest })
}

func (g specGen) ClearMounts() { g.s.Mounts = nil }

func (g specGen) Mounts() []rspec.Mount { return slices.Clone(g.s.Mounts) }

func (g specGen) AddLinuxSysctl(key, value string) {
	l := g.linux()
	if l.Sysctl == nil {
		l.Sysctl = map[string]string{}
	}
	l.Sysctl[key] = value
}

func (g specGen) RemoveLinuxSysctl(key string) {
	if g.s.Linux != nil {
		delete(g.s.Linux.Sysctl, key)
	}
}

func (g specGen) SetLinuxCgroupsPath(path string) { g.linux().CgroupsPath = path }

func (g specGen) SetLinuxRootPropagation(p string) error {
	switch p {
	case "", "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable", "runbindable":
	default:
		return fmt.Errorf("invalid rootfs propagation %q", p)
	}
	g.linux().RootfsPropagation = p
	return nil
}

func (g specGen) AddLinuxResourcesDevice(allow bool, typ string, major, minor *int64, access string) {
	r := g.resources()
	r.Devices = append(r.Devices, rspec.LinuxDeviceCgroup{Allow: allow, Type: typ, Major: major, Minor: minor, Access: access})
}

// AddLinuxResourcesHugepageLimit sets the limit of one page size.
func (g specGen) AddLinuxResourcesHugepageLimit(pageSize string, limit uint64) {
	r := g.resources()
	for i := range r.HugepageLimits {
		if r.HugepageLimits[i].Pagesize == pageSize {
			r.HugepageLimits[i].Limit = limit
			return
		}
	}
	r.HugepageLimits = append(r.HugepageLimits, rspec.LinuxHugepageLimit{Pagesize: pageSize, Limit: limit})
}

func (g specGen) AddLinuxResourcesUnified(key, value string) {
	r := g.resources()
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[key] = value
}

func (g specGen) SetLinuxResourcesCPUShares(v uint64)         { g.cpu().Shares = &v }
func (g specGen) SetLinuxResourcesCPUQuota(v int64)           { g.cpu().Quota = &v }
func (g specGen) SetLinuxResourcesCPUPeriod(v uint64)         { g.cpu().Period = &v }
func (g specGen) SetLinuxResourcesCPURealtimeRuntime(v int64) { g.cpu().RealtimeRuntime = &v }
func (g specGen) SetLinuxResourcesCPURealtimePeriod(v uint64) { g.cpu().RealtimePeriod = &v }
func (g specGen) SetLinuxResourcesCPUCpus(v string)           { g.cpu().Cpus = v }
func (g specGen) SetLinuxResourcesCPUMems(v string)           { g.cpu().Mems = v }
func (g specGen) SetLinuxResourcesMemoryLimit(v int64)        { g.memory().Limit = &v }
func (g specGen) SetLinuxResourcesMemorySwap(v int64)         { g.memory().Swap = &v }
