package spec

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UserNamespace checks a pod's namespace options for a user namespace and
// returns it when the pod has its own (mode POD), nil when it shares the
// node's (mode NODE, or no option). field names the options in the
// request ("config.linux.security_context.namespace_options").
//
// What berth supports is what the kubelet asks for: one uid and one gid
// mapping each, container id 0 mapped, and the pod's own PID and IPC
// namespaces (a user namespace owns the namespaces made with it; the
// node's are not). The node's network is allowed (KEP-5607): the pod then
// sees the host's sysfs, bound read-only, as it may not mount its own.
func UserNamespace(o *runtimeapi.NamespaceOption, field string) (*runtimeapi.UserNamespace, error) {
	u := o.GetUsernsOptions()
	field += ".userns_options"
	if u == nil {
		// Not POD, whatever the zero mode says: no option is the node's.
		return nil, nil
	}
	switch u.GetMode() {
	case runtimeapi.NamespaceMode_NODE:
		if len(u.GetUids()) > 0 || len(u.GetGids()) > 0 {
			return nil, invalid(field, "mappings are only for mode POD")
		}
		return nil, nil
	case runtimeapi.NamespaceMode_POD:
	default:
		return nil, invalid(field+".mode", "%s is not supported: a pod has its own user namespace (POD) or the node's (NODE)", u.GetMode())
	}
	if err := checkMapping(field+".uids", u.GetUids()); err != nil {
		return nil, err
	}
	if err := checkMapping(field+".gids", u.GetGids()); err != nil {
		return nil, err
	}
	for name, mode := range map[string]runtimeapi.NamespaceMode{"pid": o.GetPid(), "ipc": o.GetIpc()} {
		if mode == runtimeapi.NamespaceMode_NODE {
			return nil, invalid(field, "a pod in its own user namespace cannot share the node's %s namespace", name)
		}
	}
	return u, nil
}

func checkMapping(field string, m []*runtimeapi.IDMapping) error {
	switch {
	case len(m) != 1:
		return invalid(field, "%d mappings: berth takes exactly one", len(m))
	case m[0].GetContainerId() != 0:
		return invalid(field+"[0].container_id", "%d: the mapping must start at 0 (root of the pod)", m[0].GetContainerId())
	case m[0].GetLength() == 0:
		return invalid(field+"[0].length", "must not be 0")
	case uint64(m[0].GetHostId())+uint64(m[0].GetLength()) > 1<<32:
		return invalid(field+"[0]", "host ids %d+%d overflow", m[0].GetHostId(), m[0].GetLength())
	}
	return nil
}

// HostRoot is the host uid and gid of the pod's root in its user
// namespace u (validated by UserNamespace).
func HostRoot(u *runtimeapi.UserNamespace) (uid, gid uint32) {
	return u.GetUids()[0].GetHostId(), u.GetGids()[0].GetHostId()
}

// userNamespace is the pod's user namespace, joined by the container: the
// container's options may repeat the pod's (the kubelet sends both) but
// not differ from them.
func (b *builder) userNamespace() (*runtimeapi.UserNamespace, error) {
	pod := b.psc.GetNamespaceOptions().GetUsernsOptions()
	podMode := runtimeapi.NamespaceMode_NODE
	if pod != nil && pod.GetMode() == runtimeapi.NamespaceMode_POD {
		podMode = runtimeapi.NamespaceMode_POD
	}
	if c := b.sc.GetNamespaceOptions().GetUsernsOptions(); c != nil && c.GetMode() != podMode {
		return nil, invalid("linux.security_context.namespace_options.userns_options.mode",
			"%s, but the pod's user namespace is %s: a container is in its pod's", c.GetMode(), podMode)
	}
	if podMode == runtimeapi.NamespaceMode_NODE {
		return nil, nil
	}
	return pod, nil
}

// userNamespaceSpec adds the pod's user namespace (pause's) to the
// container's namespaces. Its mappings are not repeated: libcontainer
// reads them from the namespace it joins.
func (b *builder) userNamespaceSpec(ns []specs.LinuxNamespace) ([]specs.LinuxNamespace, error) {
	u, err := b.userNamespace()
	if err != nil || u == nil {
		return ns, err
	}
	p, err := b.nsPath("user")
	if err != nil {
		return nil, err
	}
	return append(ns, specs.LinuxNamespace{Type: specs.UserNamespace, Path: p}), nil
}

// idmapBinds id-maps every bind mount of a container in a user namespace
// but image volumes (berth maps their layers itself): files owned by the
// host's root then belong to the pod's root, as the kubelet expects of
// volumes and of the pod's own files (/etc/hosts and the like). A mount
// with its own mappings (the kubelet gives every volume the pod's) keeps
// them.
func (b *builder) idmapBinds(s *specs.Spec, image map[string]bool) {
	var explicit = map[string]*runtimeapi.Mount{}
	for _, m := range b.in.Config.GetMounts() {
		if len(m.GetUidMappings()) > 0 && len(m.GetGidMappings()) > 0 {
			explicit[m.GetContainerPath()] = m
		}
	}
	u, _ := b.userNamespace()
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if m.Type != "bind" || image[m.Destination] {
			continue
		}
		if e, ok := explicit[m.Destination]; ok && !sameMapping(e, u) {
			m.UIDMappings = ociMappings(e.GetUidMappings())
			m.GIDMappings = ociMappings(e.GetGidMappings())
			continue
		}
		m.Options = append(m.Options, "idmap")
	}
}

func sameMapping(m *runtimeapi.Mount, u *runtimeapi.UserNamespace) bool {
	eq := func(a, b []*runtimeapi.IDMapping) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i].GetContainerId() != b[i].GetContainerId() || a[i].GetHostId() != b[i].GetHostId() || a[i].GetLength() != b[i].GetLength() {
				return false
			}
		}
		return true
	}
	return eq(m.GetUidMappings(), u.GetUids()) && eq(m.GetGidMappings(), u.GetGids())
}

func ociMappings(in []*runtimeapi.IDMapping) []specs.LinuxIDMapping {
	out := make([]specs.LinuxIDMapping, 0, len(in))
	for _, m := range in {
		out = append(out, specs.LinuxIDMapping{ContainerID: m.GetContainerId(), HostID: m.GetHostId(), Size: m.GetLength()})
	}
	return out
}

// checkUserNamespace refuses what cannot run in a pod's user namespace.
func (b *builder) checkUserNamespace() error {
	u, err := b.userNamespace()
	if err != nil || u == nil {
		return err
	}
	if b.sc.GetPrivileged() {
		return invalid("linux.security_context.privileged", "a privileged container cannot run in a pod's user namespace")
	}
	return nil
}
