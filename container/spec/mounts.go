package spec

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func defaultMounts(privileged bool) []specs.Mount {
	sysOpt, cgOpt := "ro", "ro"
	if privileged {
		sysOpt, cgOpt = "rw", "rw"
	}
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", sysOpt}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", cgOpt}},
	}
}

// hostSysfs binds the host's /sys, read-only, in place of a sysfs of the
// container's own: sysfs may be mounted only by the user namespace that
// owns the network namespace, which a pod in its own user namespace on
// the host's network (KEP-5607) does not. Not id-mapped: sysfs cannot be.
func hostSysfs(s *specs.Spec) {
	for i, m := range s.Mounts {
		if m.Destination == "/sys" && m.Type == "sysfs" {
			s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys",
				Options: []string{"rbind", "rprivate", "nosuid", "noexec", "nodev", "ro"}}
		}
	}
}

func bind(dst, src string, ro bool, propagation string) specs.Mount {
	opt := "rw"
	if ro {
		opt = "ro"
	}
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", propagation, opt}}
}

func (b *builder) mounts(s *specs.Spec) error {
	privileged := b.sc.GetPrivileged()
	ro := b.sc.GetReadonlyRootfs()
	var pod []specs.Mount
	p := b.in.Pod
	if p.HostnamePath != "" {
		pod = append(pod, bind("/etc/hostname", p.HostnamePath, ro, "rprivate"))
	}
	if p.HostsPath != "" {
		pod = append(pod, bind("/etc/hosts", p.HostsPath, ro, "rprivate"))
	}
	if p.ResolvConfPath != "" {
		pod = append(pod, bind("/etc/resolv.conf", p.ResolvConfPath, ro, "rprivate"))
	}
	shm := p.ShmPath
	if shm == "" && b.podNamespaceMode(func(o *runtimeapi.NamespaceOption) runtimeapi.NamespaceMode { return o.GetIpc() }) == runtimeapi.NamespaceMode_NODE {
		shm = "/dev/shm"
	}
	if shm != "" {
		pod = append(pod, bind("/dev/shm", shm, false, "rprivate"))
	}
	user, rootfsProp, err := b.criMounts()
	if err != nil {
		return err
	}
	// Later sources win on the same destination: CRI mounts (the kubelet's
	// own /etc/hosts, volumes) over the pod's files over the defaults.
	byDest := map[string]int{}
	var all []specs.Mount
	for _, group := range [][]specs.Mount{defaultMounts(privileged), pod, user} {
		for _, m := range group {
			if i, ok := byDest[m.Destination]; ok {
				all[i] = m
				continue
			}
			byDest[m.Destination] = len(all)
			all = append(all, m)
		}
	}
	// Parents before children, whatever order the request gave.
	sort.SliceStable(all, func(i, j int) bool { return depth(all[i].Destination) < depth(all[j].Destination) })
	s.Mounts = all
	s.Linux.RootfsPropagation = rootfsProp
	if u, err := b.userNamespace(); err != nil {
		return err
	} else if u != nil {
		image := map[string]bool{}
		for _, m := range b.in.Config.GetMounts() {
			if IsImageMount(m) {
				image[m.GetContainerPath()] = true
			}
		}
		b.idmapBinds(s, image)
		if b.podNamespaceMode(func(o *runtimeapi.NamespaceOption) runtimeapi.NamespaceMode { return o.GetNetwork() }) == runtimeapi.NamespaceMode_NODE {
			hostSysfs(s)
		}
	}
	if !privileged {
		if b.in.Config.GetLinux().GetSecurityContext() == nil {
			s.Linux.MaskedPaths = append([]string{}, DefaultMaskedPaths...)
			s.Linux.ReadonlyPaths = append([]string{}, DefaultReadonlyPaths...)
		} else {
			// The kubelet always sends the lists; empty ones mean
			// procMount: Unmasked.
			s.Linux.MaskedPaths = append([]string{}, b.sc.GetMaskedPaths()...)
			s.Linux.ReadonlyPaths = append([]string{}, b.sc.GetReadonlyPaths()...)
		}
	}
	return nil
}

// DefaultMaskedPaths and DefaultReadonlyPaths are the kubelet's (and
// containerd's) defaults, used when a request carries no security context.
var (
	DefaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	DefaultReadonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

func depth(p string) int {
	p = path.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

func (b *builder) criMounts() ([]specs.Mount, string, error) {
	var out []specs.Mount
	rootfsProp := ""
	for i, m := range b.in.Config.GetMounts() {
		field := fmt.Sprintf("mounts[%d]", i)
		dst := m.GetContainerPath()
		if dst == "" || !path.IsAbs(dst) {
			return nil, "", invalid(field+".container_path", "%q is not an absolute path", dst)
		}
		if m.GetRecursiveReadOnly() && b.in.Pod.Runtime.NoRecursiveReadOnly {
			return nil, "", invalid(field+".recursive_read_only", "the pod's runtime handler %q has recursive read-only mounts disabled (disable_recursive_read_only_mounts)", b.in.Pod.Runtime.Handler)
		}
		if IsImageMount(m) {
			if err := CheckImageMount(field, m); err != nil {
				return nil, "", err
			}
			src, ok := b.in.ImageVolumes[i]
			if !ok {
				return nil, "", fmt.Errorf("%s: image volume %s was not prepared", field, m.GetImage().GetImage())
			}
			// The source is itself a read-only mount; private, as
			// nothing is ever mounted under it.
			bm := bind(dst, src, true, "rprivate")
			if m.GetRecursiveReadOnly() {
				bm.Options[2] = "rro"
			}
			opts, err := withMountOptions(field, bm.Options, m.GetMountOptions())
			if err != nil {
				return nil, "", err
			}
			bm.Options = opts
			out = append(out, bm)
			continue
		}
		src := m.GetHostPath()
		if src == "" || !filepath.IsAbs(src) {
			return nil, "", invalid(field+".host_path", "%q is not an absolute path", src)
		}
		if err := b.in.Host.MountSource(src); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				// A filesystem that does not answer: not the caller's mistake.
				return nil, "", fmt.Errorf("%s.host_path %q: %w", field, src, err)
			}
			return nil, "", invalid(field+".host_path", "%w", err)
		}
		prop := "rprivate"
		switch m.GetPropagation() {
		case runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
			have, err := b.in.Host.Propagation(src)
			if err != nil {
				return nil, "", invalid(field+".host_path", "%w", err)
			}
			if have == PropagationPrivate {
				return nil, "", invalid(field+".propagation", "%s is on a private mount: it cannot receive host mounts (rslave needs a shared or slave mount)", src)
			}
			prop = "rslave"
			if rootfsProp == "" {
				rootfsProp = "rslave"
			}
		case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			if !b.sc.GetPrivileged() {
				return nil, "", invalid(field+".propagation", "bidirectional propagation needs a privileged container")
			}
			have, err := b.in.Host.Propagation(src)
			if err != nil {
				return nil, "", invalid(field+".host_path", "%w", err)
			}
			if have != PropagationShared {
				return nil, "", invalid(field+".propagation", "%s is not on a shared mount: bidirectional propagation needs one", src)
			}
			prop = "rshared"
			rootfsProp = "rshared"
		default:
			return nil, "", invalid(field+".propagation", "unknown propagation %d", m.GetPropagation())
		}
		bm := bind(dst, src, m.GetReadonly(), prop)
		if m.GetRecursiveReadOnly() {
			if !m.GetReadonly() || prop != "rprivate" {
				return nil, "", invalid(field+".recursive_read_only", "needs readonly and private propagation")
			}
			bm.Options[2] = "rro"
		}
		opts, err := withMountOptions(field, bm.Options, m.GetMountOptions())
		if err != nil {
			return nil, "", err
		}
		bm.Options = opts
		// SELinux relabelling is ignored: berth runs only where SELinux is off.
		out = append(out, bm)
	}
	return out, rootfsProp, nil
}

// bindMountOptions are the options a CRI mount may add to its bind mount
// (mount_options, KEP-5855; RuntimeFeatures.mount_options): runc applies
// them with the bind's remount. Anything else is refused, so that no
// option can undo what the mount's own fields asked for (ro, rro,
// propagation).
var bindMountOptions = map[string]bool{"noexec": true, "nodev": true, "nosuid": true}

// withMountOptions adds a CRI mount's mount_options to a bind mount's.
func withMountOptions(field string, opts, extra []string) ([]string, error) {
	for j, o := range extra {
		if !bindMountOptions[o] {
			return nil, invalid(fmt.Sprintf("%s.mount_options[%d]", field, j), "%q is not one of noexec, nodev and nosuid", o)
		}
		if !slices.Contains(opts, o) {
			opts = append(opts, o)
		}
	}
	return opts, nil
}

func (b *builder) devices(s *specs.Spec) error {
	s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
	if b.sc.GetPrivileged() && !b.in.Pod.Runtime.PrivilegedWithoutHostDevices {
		all, err := b.in.Host.AllDevices()
		if err != nil {
			return fmt.Errorf("list host devices for privileged container %s: %w", b.in.ID, err)
		}
		s.Linux.Devices = all
		s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	}
	for i, d := range b.in.Config.GetDevices() {
		field := fmt.Sprintf("devices[%d]", i)
		perms := d.GetPermissions()
		if perms == "" {
			perms = "rwm"
		}
		if strings.Trim(perms, "rwm") != "" {
			return invalid(field+".permissions", "%q is not a combination of r, w and m", perms)
		}
		if !path.IsAbs(d.GetContainerPath()) {
			return invalid(field+".container_path", "%q is not absolute", d.GetContainerPath())
		}
		devs, err := b.in.Host.Devices(d.GetHostPath())
		if err != nil {
			return invalid(field+".host_path", "%w", err)
		}
		for _, dev := range devs {
			rel := strings.TrimPrefix(dev.Path, path.Clean(d.GetHostPath()))
			dev.Path = path.Join(d.GetContainerPath(), rel)
			s.Linux.Devices = replaceDevice(s.Linux.Devices, dev)
			major, minor := dev.Major, dev.Minor
			s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{
				Allow: true, Type: dev.Type, Major: &major, Minor: &minor, Access: perms,
			})
		}
	}
	return nil
}

func replaceDevice(list []specs.LinuxDevice, d specs.LinuxDevice) []specs.LinuxDevice {
	for i := range list {
		if list[i].Path == d.Path {
			list[i] = d
			return list
		}
	}
	return append(list, d)
}

// IsImageMount tells whether a CRI mount mounts an image (an image
// volume, KEP 4639) rather than a host path.
func IsImageMount(m *runtimeapi.Mount) bool { return m.GetImage().GetImage() != "" }

// CheckImageMount checks an image mount before anything is prepared for
// it: an image volume is read-only by definition, has no host path, and
// is private (nothing mounts under it, on either side). field names the
// mount ("mounts[i]").
func CheckImageMount(field string, m *runtimeapi.Mount) error {
	switch {
	case m.GetHostPath() != "":
		return invalid(field+".host_path", "must be empty for an image mount (image %s)", m.GetImage().GetImage())
	case !m.GetReadonly():
		return invalid(field+".readonly", "an image volume (image %s) is read-only: readonly must be true", m.GetImage().GetImage())
	case m.GetPropagation() == runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		return invalid(field+".propagation", "an image volume cannot propagate mounts back to the host")
	case m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_PRIVATE &&
		m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		return invalid(field+".propagation", "unknown propagation %d", m.GetPropagation())
	}
	return nil
}
