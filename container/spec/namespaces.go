package spec

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podNamespaceMode reads one namespace mode, preferring the container's
// options (the kubelet sets both) and falling back to the pod's.
func (b *builder) podNamespaceMode(get func(*runtimeapi.NamespaceOption) runtimeapi.NamespaceMode) runtimeapi.NamespaceMode {
	if o := b.sc.GetNamespaceOptions(); o != nil {
		return get(o)
	}
	return get(b.psc.GetNamespaceOptions())
}

func (b *builder) nsPath(kind string) (string, error) {
	if b.in.Pod.PausePID <= 0 {
		return "", fmt.Errorf("pod sandbox %s has no running pause process to join its %s namespace", b.in.Pod.ID, kind)
	}
	return fmt.Sprintf("/proc/%d/ns/%s", b.in.Pod.PausePID, kind), nil
}

func (b *builder) namespaces(s *specs.Spec) error {
	if b.in.Sandbox {
		return b.sandboxNamespaces(s)
	}
	ns := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	if b.in.Host.CgroupV2() && !b.sc.GetPrivileged() {
		// On v1 a cgroup namespace hides nothing useful and costs a clone
		// flag. A privileged container stays in the host's, as containerd
		// and CRI-O keep it: node agents run privileged to see the host's
		// tree in /proc/self/cgroup, and the kubelet's own checks read
		// cgroup files only in unprivileged containers (docs/cgroups.md).
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	net := b.podNamespaceMode(func(o *runtimeapi.NamespaceOption) runtimeapi.NamespaceMode { return o.GetNetwork() })
	if net != runtimeapi.NamespaceMode_NODE {
		p := b.in.Pod.NetNSPath
		if p == "" {
			var err error
			if p, err = b.nsPath("net"); err != nil {
				return err
			}
		}
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: p})
		// A host-network pod has the host's hostname, hence its UTS namespace.
		p, err := b.nsPath("uts")
		if err != nil {
			return err
		}
		ns = append(ns, specs.LinuxNamespace{Type: specs.UTSNamespace, Path: p})
	}
	if b.podNamespaceMode(func(o *runtimeapi.NamespaceOption) runtimeapi.NamespaceMode { return o.GetIpc() }) != runtimeapi.NamespaceMode_NODE {
		p, err := b.nsPath("ipc")
		if err != nil {
			return err
		}
		ns = append(ns, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: p})
	}
	switch mode := b.podNamespaceMode(func(o *runtimeapi.NamespaceOption) runtimeapi.NamespaceMode { return o.GetPid() }); mode {
	case runtimeapi.NamespaceMode_NODE:
	case runtimeapi.NamespaceMode_POD:
		p, err := b.nsPath("pid")
		if err != nil {
			return err
		}
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: p})
	case runtimeapi.NamespaceMode_TARGET:
		if b.in.TargetPID <= 0 {
			return invalid("linux.security_context.namespace_options.target_id", "target container %q is not running", b.sc.GetNamespaceOptions().GetTargetId())
		}
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: fmt.Sprintf("/proc/%d/ns/pid", b.in.TargetPID)})
	case runtimeapi.NamespaceMode_CONTAINER:
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace})
	default:
		return invalid("linux.security_context.namespace_options.pid", "unknown mode %d", mode)
	}
	ns, err := b.userNamespaceSpec(ns)
	if err != nil {
		return err
	}
	s.Linux.Namespaces = ns
	return nil
}

// sandboxNamespaces are those of the pod's infra container, which makes
// the pod's namespaces rather than joining them: the pinned network
// namespace, and new UTS (unless on the host's network), IPC and PID
// namespaces (unless the pod shares the host's).
func (b *builder) sandboxNamespaces(s *specs.Spec) error {
	o := b.psc.GetNamespaceOptions()
	ns := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	if b.in.Host.CgroupV2() {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	if o.GetNetwork() != runtimeapi.NamespaceMode_NODE {
		if b.in.Pod.NetNSPath == "" {
			return fmt.Errorf("pod sandbox %s has no network namespace", b.in.Pod.ID)
		}
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: b.in.Pod.NetNSPath},
			specs.LinuxNamespace{Type: specs.UTSNamespace})
	}
	if o.GetIpc() != runtimeapi.NamespaceMode_NODE {
		ns = append(ns, specs.LinuxNamespace{Type: specs.IPCNamespace})
	}
	if o.GetPid() != runtimeapi.NamespaceMode_NODE {
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace})
	}
	s.Linux.Namespaces = ns
	return nil
}
