package spec

import (
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func podUserNS(uids, gids []*runtimeapi.IDMapping) *runtimeapi.UserNamespace {
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: uids, Gids: gids}
}

var testMapping = []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 1 << 20, Length: 65536}}

func TestUserNamespaceOption(t *testing.T) {
	const field = "namespace_options"
	two := append([]*runtimeapi.IDMapping{}, testMapping[0], &runtimeapi.IDMapping{ContainerId: 65536, HostId: 1 << 21, Length: 1})
	for _, tc := range []struct {
		name    string
		opts    *runtimeapi.NamespaceOption
		own     bool
		invalid string
	}{
		{name: "no options", opts: nil},
		{name: "no user namespace option (zero mode is POD)", opts: &runtimeapi.NamespaceOption{}},
		{name: "node", opts: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}},
		{name: "pod", opts: &runtimeapi.NamespaceOption{UsernsOptions: podUserNS(testMapping, testMapping)}, own: true},
		{name: "node with mappings", opts: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE, Uids: testMapping}},
			invalid: field + ".userns_options"},
		{name: "two uid mappings", opts: &runtimeapi.NamespaceOption{UsernsOptions: podUserNS(two, testMapping)}, invalid: field + ".userns_options.uids"},
		{name: "no gid mapping", opts: &runtimeapi.NamespaceOption{UsernsOptions: podUserNS(testMapping, nil)}, invalid: field + ".userns_options.gids"},
		{name: "root not mapped", opts: &runtimeapi.NamespaceOption{UsernsOptions: podUserNS([]*runtimeapi.IDMapping{{ContainerId: 1, HostId: 1 << 20, Length: 10}}, testMapping)},
			invalid: field + ".userns_options.uids[0].container_id"},
		{name: "empty mapping", opts: &runtimeapi.NamespaceOption{UsernsOptions: podUserNS([]*runtimeapi.IDMapping{{HostId: 1 << 20}}, testMapping)},
			invalid: field + ".userns_options.uids[0].length"},
		{name: "overflow", opts: &runtimeapi.NamespaceOption{UsernsOptions: podUserNS([]*runtimeapi.IDMapping{{HostId: 1<<32 - 10, Length: 11}}, testMapping)},
			invalid: field + ".userns_options.uids[0]"},
		{name: "container mode", opts: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}},
			invalid: field + ".userns_options.mode"},
		{name: "target mode", opts: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}},
			invalid: field + ".userns_options.mode"},
		{name: "with host network", opts: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, UsernsOptions: podUserNS(testMapping, testMapping)}, own: true},
		{name: "with host ipc", opts: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE, UsernsOptions: podUserNS(testMapping, testMapping)},
			invalid: field + ".userns_options"},
		{name: "with host pid", opts: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE, UsernsOptions: podUserNS(testMapping, testMapping)},
			invalid: field + ".userns_options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := UserNamespace(tc.opts, field)
			checkInvalid(t, err, tc.invalid)
			if (u != nil) != tc.own {
				t.Fatalf("own user namespace: %v, want %v", u, tc.own)
			}
		})
	}
	if uid, gid := HostRoot(podUserNS(testMapping, []*runtimeapi.IDMapping{{HostId: 7, Length: 1}})); uid != 1<<20 || gid != 7 {
		t.Fatalf("HostRoot = %d, %d", uid, gid)
	}
}

// A container of a pod with its own user namespace joins pause's, and
// every bind mount but image volumes is id-mapped; a mount with other
// mappings keeps them.
func TestUserNamespaceSpec(t *testing.T) {
	in := baseInput()
	u := podUserNS(testMapping, testMapping)
	in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: u}}}
	other := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 5000, Length: 10}}
	in.Config.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/vol", HostPath: "/h", UidMappings: testMapping, GidMappings: testMapping},
		{ContainerPath: "/plain", HostPath: "/h2"},
		{ContainerPath: "/other", HostPath: "/h3", UidMappings: other, GidMappings: other},
		{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
	}
	in.ImageVolumes = map[int]string{3: "/v/3"}
	s, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if ns := nsOf(s, specs.UserNamespace); ns == nil || ns.Path != "/proc/42/ns/user" {
		t.Fatalf("user namespace %+v, want pause's", ns)
	}
	if len(s.Linux.UIDMappings) != 0 || len(s.Linux.GIDMappings) != 0 {
		t.Errorf("mappings repeated in the spec: libcontainer reads them from the joined namespace")
	}
	for _, dst := range []string{"/vol", "/plain", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname", "/dev/shm"} {
		if m := findMount(s, dst); m == nil || !contains(m.Options, "idmap") || m.UIDMappings != nil {
			t.Errorf("%s: %+v, want id-mapped with the pod's user namespace", dst, m)
		}
	}
	if m := findMount(s, "/other"); contains(m.Options, "idmap") ||
		!reflect.DeepEqual(m.UIDMappings, []specs.LinuxIDMapping{{ContainerID: 0, HostID: 5000, Size: 10}}) || len(m.GIDMappings) != 1 {
		t.Errorf("/other: %+v, want its own mappings", m)
	}
	if m := findMount(s, "/iv"); contains(m.Options, "idmap") {
		t.Errorf("image volume id-mapped by libcontainer: %+v (berth maps its layers)", m)
	}
	if m := findMount(s, "/proc"); contains(m.Options, "idmap") {
		t.Errorf("/proc: %+v", m)
	}
	if m := findMount(s, "/sys"); m.Type != "sysfs" {
		t.Errorf("/sys on the pod's network: %+v, want a sysfs of its own", m)
	}

	// On the host's network, the host's sysfs, read-only, not id-mapped.
	in.Pod.Config.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	s, err = Build(in)
	if err != nil {
		t.Fatalf("host network: %v", err)
	}
	if m := findMount(s, "/sys"); m.Type != "bind" || m.Source != "/sys" || !contains(m.Options, "ro") || !contains(m.Options, "rbind") || contains(m.Options, "idmap") {
		t.Errorf("/sys on the host's network: %+v, want the host's bound read-only", m)
	}
	if nsOf(s, specs.NetworkNamespace) != nil || nsOf(s, specs.UserNamespace) == nil {
		t.Errorf("host network in the pod's user namespace: namespaces %+v", s.Linux.Namespaces)
	}
	in.Pod.Config.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_POD

	// The container may repeat the pod's option, not contradict it.
	sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: u}
	if _, err := Build(in); err != nil {
		t.Fatalf("container repeating the pod's user namespace: %v", err)
	}
	sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}
	_, err = Build(in)
	checkInvalid(t, err, "linux.security_context.namespace_options.userns_options.mode")
	sc(in).NamespaceOptions = nil
	sc(in).Privileged = true
	in.Pod.Config.Linux.SecurityContext.Privileged = true
	_, err = Build(in)
	checkInvalid(t, err, "linux.security_context.privileged")

	// Without a user namespace in the pod, a container cannot ask for one.
	in = baseInput()
	sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: u}
	_, err = Build(in)
	checkInvalid(t, err, "linux.security_context.namespace_options.userns_options.mode")
	in = baseInput()
	s, err = Build(in)
	if err != nil || nsOf(s, specs.UserNamespace) != nil || contains(findMount(s, "/etc/hosts").Options, "idmap") {
		t.Fatalf("no user namespace: %v", err)
	}
}
