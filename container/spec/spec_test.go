package spec

import (
	"errors"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
)

type fakeHost struct {
	apparmor bool
	aa       AppArmor // overrides apparmor
	ownOOM   int
	v2       bool
	files    map[string]string
	prop     map[string]Propagation
	caps     []string // held capabilities; nil: all
	noHuge   bool     // no hugetlb controller
}

func (h fakeHost) AppArmor() AppArmor {
	if h.aa != nil {
		return h.aa
	}
	return &fakeAppArmor{usable: h.apparmor}
}
func (h fakeHost) OwnOOMScoreAdj() int { return h.ownOOM }
func (h fakeHost) CgroupV2() bool      { return h.v2 }
func (h fakeHost) Hugetlb() bool       { return !h.noHuge }
func (h fakeHost) Capabilities() []string {
	if h.caps != nil {
		return h.caps
	}
	return AllCapabilities()
}
func (h fakeHost) AllDevices() ([]specs.LinuxDevice, error) {
	return []specs.LinuxDevice{{Path: "/dev/sda", Type: "b", Major: 8}}, nil
}
func (h fakeHost) Devices(p string) ([]specs.LinuxDevice, error) {
	if p == "/dev/fuse" {
		return []specs.LinuxDevice{{Path: p, Type: "c", Major: 10, Minor: 229}}, nil
	}
	return nil, fs.ErrNotExist
}
func (h fakeHost) MountSource(p string) error {
	if strings.HasPrefix(p, "/missing") {
		return fs.ErrNotExist
	}
	return nil
}
func (h fakeHost) Propagation(p string) (Propagation, error) { return h.prop[p], nil }
func (h fakeHost) ReadFile(p string) ([]byte, error) {
	if s, ok := h.files[p]; ok {
		return []byte(s), nil
	}
	return nil, os.ErrNotExist
}

type mapFS map[string]string

func (m mapFS) ReadFile(p string) ([]byte, error) {
	if s, ok := m[p]; ok {
		return []byte(s), nil
	}
	return nil, os.ErrNotExist
}

var testRootfs = mapFS{
	"/etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\nwww-data:x:33:33:www:/var/www:/bin/sh\ndefault-user:x:1000:1000::/home/default:/bin/sh\n",
	"/etc/group":  "root:x:0:\nwww-data:x:33:\nusers:x:100:www-data\ngroup-defined-in-image:x:50000:default-user\n",
}

func baseInput() *Input {
	return &Input{
		ID:     "c1",
		Rootfs: "/run/berth/containers/c1/rootfs",
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		},
		Pod: Pod{
			ID: "p1",
			Config: &runtimeapi.PodSandboxConfig{
				Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod", Namespace: "ns", Uid: "u"},
				Hostname: "podhost",
			},
			NetNSPath:      "/run/berth/netns/p1",
			PausePID:       42,
			CgroupParent:   parentOf(cgroup.Cgroupfs, "/kubepods/podu"),
			HostsPath:      "/pod/hosts",
			ResolvConfPath: "/pod/resolv.conf",
			HostnamePath:   "/pod/hostname",
			ShmPath:        "/pod/shm",
		},
		Image: ImageConfig{Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "true"}, Env: []string{"PATH=/bin", "A=image"}},
		Host:  fakeHost{files: map[string]string{}},
		Files: testRootfs,
	}
}

func sc(in *Input) *runtimeapi.LinuxContainerSecurityContext {
	if in.Config.Linux == nil {
		in.Config.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if in.Config.Linux.SecurityContext == nil {
		in.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	return in.Config.Linux.SecurityContext
}

func TestArgs(t *testing.T) {
	img := ImageConfig{Entrypoint: []string{"/ep"}, Cmd: []string{"cmd"}}
	for _, tc := range []struct {
		name      string
		cmd, args []string
		img       ImageConfig
		want      []string
	}{
		{"image only", nil, nil, img, []string{"/ep", "cmd"}},
		{"args replace cmd", nil, []string{"a"}, img, []string{"/ep", "a"}},
		{"command replaces entrypoint and cmd", []string{"/c"}, nil, img, []string{"/c"}},
		{"command and args", []string{"/c"}, []string{"a"}, img, []string{"/c", "a"}},
		{"no entrypoint", nil, nil, ImageConfig{Cmd: []string{"sh"}}, []string{"sh"}},
		{"nothing", nil, nil, ImageConfig{}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Args(&runtimeapi.ContainerConfig{Command: tc.cmd, Args: tc.args}, tc.img)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		img  []string
		kvs  []*runtimeapi.KeyValue
		want []string
	}{
		{"default path", nil, nil, []string{"HOSTNAME=h", DefaultPath}},
		{"image path kept", []string{"PATH=/x"}, nil, []string{"HOSTNAME=h", "PATH=/x"}},
		{"cri overrides in place", []string{"A=1", "PATH=/x", "B=2"}, []*runtimeapi.KeyValue{{Key: "A", Value: []byte("3")}, {Key: "C", Value: []byte("4")}},
			[]string{"HOSTNAME=h", "A=3", "PATH=/x", "B=2", "C=4"}},
		{"value with equals", []string{"PATH=/x"}, []*runtimeapi.KeyValue{{Key: "Q", Value: []byte("a=b")}}, []string{"HOSTNAME=h", "PATH=/x", "Q=a=b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Env("h", ImageConfig{Env: tc.img}, tc.kvs)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func i64(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }

func TestUser(t *testing.T) {
	for _, tc := range []struct {
		name    string
		image   string
		mod     func(*runtimeapi.LinuxContainerSecurityContext)
		podSup  []int64
		want    specs.User
		invalid string
	}{
		{name: "root default", want: specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "image uid", image: "1002", want: specs.User{UID: 1002, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "image name", image: "www-data", want: specs.User{UID: 33, GID: 33, AdditionalGids: []uint32{33, 100}}},
		{name: "image uid:gid", image: "1003:1004", want: specs.User{UID: 1003, GID: 1004, AdditionalGids: []uint32{1004}}},
		{name: "image name:gid", image: "www-data:1004", want: specs.User{UID: 33, GID: 1004, AdditionalGids: []uint32{1004, 100}}},
		{name: "predefined group", image: "1000", want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 50000}}},
		{name: "run_as_user over image", image: "www-data", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUser = i64(65534) },
			want: specs.User{UID: 65534, GID: 65534, AdditionalGids: []uint32{65534}}},
		{name: "run_as_group", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUser = i64(1000); s.RunAsGroup = i64(7) },
			want: specs.User{UID: 1000, GID: 7, AdditionalGids: []uint32{7, 50000}}},
		{name: "run_as_username", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUsername = "www-data" },
			want: specs.User{UID: 33, GID: 33, AdditionalGids: []uint32{33, 100}}},
		{name: "unknown username", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUsername = "nope" },
			invalid: "linux.security_context.run_as_username"},
		{name: "unknown image user", image: "ghost", invalid: "image user"},
		{name: "supplemental groups", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.SupplementalGroups = []int64{5, 3} }, podSup: []int64{9},
			want: specs.User{AdditionalGids: []uint32{0, 3, 5, 9}}},
		{name: "strict policy", image: "www-data", mod: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
		}, want: specs.User{UID: 33, GID: 33, AdditionalGids: []uint32{33}}},
		{name: "negative uid", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUser = i64(-1) }, invalid: "linux.security_context.run_as_user"},
		{name: "run_as_group without user", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsGroup = i64(7) },
			invalid: "linux.security_context.run_as_group"},
		{name: "run_as_group without user, image user set", image: "www-data", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsGroup = i64(7) },
			invalid: "linux.security_context.run_as_group"},
		{name: "run_as_group with username", mod: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUsername = "www-data"; s.RunAsGroup = i64(7) },
			want: specs.User{UID: 33, GID: 7, AdditionalGids: []uint32{7, 100}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput()
			in.Image.User = tc.image
			if tc.mod != nil {
				tc.mod(sc(in))
			}
			if tc.podSup != nil {
				in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{SupplementalGroups: tc.podSup}}
			}
			s, err := Build(in)
			checkInvalid(t, err, tc.invalid)
			if tc.invalid != "" {
				return
			}
			if !reflect.DeepEqual(s.Process.User, tc.want) {
				t.Fatalf("user %+v, want %+v", s.Process.User, tc.want)
			}
		})
	}
}

func checkInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var ie *InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("error %v, want an invalid %s", err, field)
	}
	if !strings.HasPrefix(ie.Field, field) {
		t.Fatalf("invalid field %q (%v), want %q", ie.Field, err, field)
	}
}

// withoutCaps is every known capability but those named: what root holds
// on a machine whose bounding set lacks some.
func withoutCaps(drop ...string) []string {
	var out []string
	for _, c := range AllCapabilities() {
		if !contains(drop, c) {
			out = append(out, c)
		}
	}
	return out
}

func TestCapabilities(t *testing.T) {
	noResource := withoutCaps("CAP_SYS_RESOURCE")
	for _, tc := range []struct {
		name      string
		add, drop []string
		held      []string // nil: all
		has, not  []string
		invalid   string
	}{
		{name: "default", has: []string{"CAP_CHOWN", "CAP_NET_RAW"}, not: []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN"}},
		{name: "add short name", add: []string{"NET_ADMIN"}, has: []string{"CAP_NET_ADMIN", "CAP_CHOWN"}},
		{name: "drop", drop: []string{"CAP_CHOWN", "net_raw"}, not: []string{"CAP_CHOWN", "CAP_NET_RAW"}, has: []string{"CAP_KILL"}},
		{name: "drop all add one", add: []string{"SYS_ADMIN"}, drop: []string{"ALL"}, has: []string{"CAP_SYS_ADMIN"}, not: []string{"CAP_CHOWN"}},
		{name: "add all", add: []string{"ALL"}, has: []string{"CAP_SYS_ADMIN", "CAP_BPF", "CAP_SYS_RESOURCE"}},
		{name: "add all is what berth holds", add: []string{"ALL"}, held: noResource,
			has: []string{"CAP_SYS_ADMIN", "CAP_BPF", "CAP_CHOWN"}, not: []string{"CAP_SYS_RESOURCE"}},
		{name: "add all drop one", add: []string{"ALL"}, drop: []string{"SYS_ADMIN"}, held: noResource,
			has: []string{"CAP_NET_ADMIN"}, not: []string{"CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"}},
		{name: "add all drop all", add: []string{"ALL"}, drop: []string{"ALL"}, not: []string{"CAP_CHOWN", "CAP_SYS_ADMIN"}},
		{name: "default berth lacks", held: withoutCaps("CAP_MKNOD"), has: []string{"CAP_CHOWN"}, not: []string{"CAP_MKNOD"}},
		{name: "add one berth lacks", add: []string{"SYS_RESOURCE"}, held: noResource,
			invalid: "linux.security_context.capabilities.add_capabilities[0]"},
		{name: "unknown", add: []string{"FLY"}, invalid: "linux.security_context.capabilities.add_capabilities[0]"},
		{name: "unknown drop", drop: []string{"FLY"}, invalid: "linux.security_context.capabilities.drop_capabilities[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := tc.held
			if held == nil {
				held = AllCapabilities()
			}
			got, err := Capabilities(&runtimeapi.Capability{AddCapabilities: tc.add, DropCapabilities: tc.drop}, held)
			checkInvalid(t, err, tc.invalid)
			for _, c := range tc.has {
				if !contains(got, c) {
					t.Errorf("%s missing from %v", c, got)
				}
			}
			for _, c := range tc.not {
				if contains(got, c) {
					t.Errorf("%s present in %v", c, got)
				}
			}
			for _, c := range got {
				if !contains(held, c) {
					t.Errorf("%s is not held by berth, yet in %v", c, got)
				}
			}
		})
	}
}

// TestAddAllCapabilities is critest's "adding ALL capabilities" on a
// machine where root lacks CAP_SYS_RESOURCE: the spec gets every other.
func TestAddAllCapabilities(t *testing.T) {
	in := baseInput()
	in.Host = fakeHost{caps: withoutCaps("CAP_SYS_RESOURCE")}
	sc(in).Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"ALL"}}
	s, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Process.Capabilities
	for _, set := range [][]string{c.Bounding, c.Effective, c.Permitted} {
		if contains(set, "CAP_SYS_RESOURCE") || !contains(set, "CAP_SYS_ADMIN") || len(set) != len(AllCapabilities())-1 {
			t.Fatalf("capabilities %v: want all but CAP_SYS_RESOURCE", set)
		}
	}
}

func findMount(s *specs.Spec, dst string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dst {
			return &s.Mounts[i]
		}
	}
	return nil
}

func nsOf(s *specs.Spec, typ specs.LinuxNamespaceType) *specs.LinuxNamespace {
	for i := range s.Linux.Namespaces {
		if s.Linux.Namespaces[i].Type == typ {
			return &s.Linux.Namespaces[i]
		}
	}
	return nil
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mod     func(*Input)
		check   func(*testing.T, *specs.Spec)
		invalid string
	}{
		{name: "systemd cgroup", mod: func(in *Input) {
			in.Pod.CgroupParent = parentOf(cgroup.Systemd, "kubepods-besteffort-podu.slice")
		}, check: func(t *testing.T, s *specs.Spec) {
			// runc's systemd form: the scope berth-c1.scope in the slice.
			if s.Linux.CgroupsPath != "kubepods-besteffort-podu.slice:berth:c1" {
				t.Errorf("cgroups %q", s.Linux.CgroupsPath)
			}
		}},
		{name: "no cgroup parent", mod: func(in *Input) { in.Pod.CgroupParent = cgroup.Parent{} }, check: func(t *testing.T, s *specs.Spec) {
			if s.Linux.CgroupsPath != "/berth/c1" {
				t.Errorf("cgroups %q", s.Linux.CgroupsPath)
			}
		}},
		{name: "defaults", check: func(t *testing.T, s *specs.Spec) {
			if got := s.Process.Args; !reflect.DeepEqual(got, []string{"/bin/sh", "-c", "true"}) {
				t.Errorf("args %q", got)
			}
			if s.Process.Cwd != "/" || s.Root.Readonly || s.Process.NoNewPrivileges || s.Linux.Seccomp != nil {
				t.Errorf("cwd %q readonly %v nnp %v seccomp %v", s.Process.Cwd, s.Root.Readonly, s.Process.NoNewPrivileges, s.Linux.Seccomp)
			}
			if !reflect.DeepEqual(s.Linux.MaskedPaths, DefaultMaskedPaths) || !reflect.DeepEqual(s.Linux.ReadonlyPaths, DefaultReadonlyPaths) {
				t.Errorf("masked %v readonly %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
			}
			if n := nsOf(s, specs.NetworkNamespace); n == nil || n.Path != "/run/berth/netns/p1" {
				t.Errorf("net ns %+v", n)
			}
			if n := nsOf(s, specs.IPCNamespace); n == nil || n.Path != "/proc/42/ns/ipc" {
				t.Errorf("ipc ns %+v", n)
			}
			// The zero value of the CRI enum is POD: the pod's PID namespace.
			if n := nsOf(s, specs.PIDNamespace); n == nil || n.Path != "/proc/42/ns/pid" {
				t.Errorf("pid ns %+v", n)
			}
			if s.Hostname != "podhost" || s.Linux.CgroupsPath != "/kubepods/podu/c1" {
				t.Errorf("hostname %q cgroups %q", s.Hostname, s.Linux.CgroupsPath)
			}
			for dst, src := range map[string]string{"/etc/hosts": "/pod/hosts", "/etc/resolv.conf": "/pod/resolv.conf", "/etc/hostname": "/pod/hostname", "/dev/shm": "/pod/shm"} {
				if m := findMount(s, dst); m == nil || m.Source != src || m.Type != "bind" {
					t.Errorf("mount %s: %+v", dst, m)
				}
			}
			if m := findMount(s, "/sys"); m == nil || !contains(m.Options, "ro") {
				t.Errorf("sysfs %+v", m)
			}
			if s.Annotations[AnnotationSandboxID] != "p1" || s.Annotations[AnnotationContainerName] != "app" {
				t.Errorf("annotations %v", s.Annotations)
			}
		}},
		{name: "no command", mod: func(in *Input) { in.Image = ImageConfig{} }, invalid: "command"},
		{name: "relative workdir", mod: func(in *Input) { in.Config.WorkingDir = "tmp" }, invalid: "working_dir"},
		{name: "image workdir", mod: func(in *Input) { in.Image.WorkingDir = "/w" }, check: func(t *testing.T, s *specs.Spec) {
			if s.Process.Cwd != "/w" {
				t.Errorf("cwd %q", s.Process.Cwd)
			}
		}},
		{name: "empty security lists mean unmasked", mod: func(in *Input) { sc(in) }, check: func(t *testing.T, s *specs.Spec) {
			if len(s.Linux.MaskedPaths) != 0 || len(s.Linux.ReadonlyPaths) != 0 {
				t.Errorf("masked %v readonly %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
			}
		}},
		{name: "explicit masked paths", mod: func(in *Input) { sc(in).MaskedPaths = []string{"/bin/ls"}; sc(in).ReadonlyPaths = []string{"/tmp"} }, check: func(t *testing.T, s *specs.Spec) {
			if !reflect.DeepEqual(s.Linux.MaskedPaths, []string{"/bin/ls"}) || !reflect.DeepEqual(s.Linux.ReadonlyPaths, []string{"/tmp"}) {
				t.Errorf("masked %v readonly %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
			}
		}},
		{name: "readonly rootfs and nnp", mod: func(in *Input) { sc(in).ReadonlyRootfs = true; sc(in).NoNewPrivs = true }, check: func(t *testing.T, s *specs.Spec) {
			if !s.Root.Readonly || !s.Process.NoNewPrivileges || !contains(findMount(s, "/etc/hosts").Options, "ro") {
				t.Errorf("readonly %v nnp %v", s.Root.Readonly, s.Process.NoNewPrivileges)
			}
		}},
		{name: "privileged", mod: func(in *Input) {
			sc(in).Privileged = true
			sc(in).Seccomp = &runtimeapi.SecurityProfile{}
			in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if !contains(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN") || len(s.Linux.MaskedPaths) != 0 || s.Linux.Seccomp != nil {
				t.Errorf("caps %v masked %v seccomp %v", s.Process.Capabilities.Bounding, s.Linux.MaskedPaths, s.Linux.Seccomp)
			}
			if m := findMount(s, "/sys"); !contains(m.Options, "rw") {
				t.Errorf("sysfs %+v", m)
			}
			if len(s.Linux.Devices) != 1 || !s.Linux.Resources.Devices[0].Allow {
				t.Errorf("devices %+v %+v", s.Linux.Devices, s.Linux.Resources.Devices)
			}
		}},
		{name: "privileged needs privileged pod", mod: func(in *Input) { sc(in).Privileged = true }, invalid: "linux.security_context.privileged"},
		{name: "host network", mod: func(in *Input) {
			sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE}
			in.Pod.ShmPath = ""
			in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{"net.ipv4.ip_forward": "1", "kernel.shmmax": "1", "kernel.pid_max": "9"}}
		}, check: func(t *testing.T, s *specs.Spec) {
			for _, typ := range []specs.LinuxNamespaceType{specs.NetworkNamespace, specs.UTSNamespace, specs.IPCNamespace, specs.PIDNamespace} {
				if nsOf(s, typ) != nil {
					t.Errorf("%s namespace present", typ)
				}
			}
			if s.Hostname != "" || findMount(s, "/dev/shm").Source != "/dev/shm" {
				t.Errorf("hostname %q shm %+v", s.Hostname, findMount(s, "/dev/shm"))
			}
			if !reflect.DeepEqual(s.Linux.Sysctl, map[string]string{"kernel.pid_max": "9"}) {
				t.Errorf("sysctls %v", s.Linux.Sysctl)
			}
		}},
		{name: "pod sysctls", mod: func(in *Input) {
			in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{"net.ipv4.ip_forward": "1", "kernel.shmmax": "1"}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if len(s.Linux.Sysctl) != 2 {
				t.Errorf("sysctls %v", s.Linux.Sysctl)
			}
		}},
		{name: "container pid namespace", mod: func(in *Input) {
			sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
		}, check: func(t *testing.T, s *specs.Spec) {
			if n := nsOf(s, specs.PIDNamespace); n == nil || n.Path != "" {
				t.Errorf("pid ns %+v", n)
			}
		}},
		{name: "target pid namespace", mod: func(in *Input) {
			sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "other"}
			in.TargetPID = 77
		}, check: func(t *testing.T, s *specs.Spec) {
			if n := nsOf(s, specs.PIDNamespace); n == nil || n.Path != "/proc/77/ns/pid" {
				t.Errorf("pid ns %+v", n)
			}
		}},
		{name: "target not running", mod: func(in *Input) {
			sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "other"}
		}, invalid: "linux.security_context.namespace_options.target_id"},
		{name: "no pause", mod: func(in *Input) { in.Pod.PausePID = 0 }, check: nil, invalid: "-"},
		{name: "cri mounts override and sort", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{
				{ContainerPath: "/data/sub", HostPath: "/h/sub"},
				{ContainerPath: "/data", HostPath: "/h/data", Readonly: true, SelinuxRelabel: true},
				{ContainerPath: "/etc/hosts", HostPath: "/kubelet/hosts"},
			}
		}, check: func(t *testing.T, s *specs.Spec) {
			if m := findMount(s, "/etc/hosts"); m.Source != "/kubelet/hosts" {
				t.Errorf("hosts %+v", m)
			}
			var order []string
			for _, m := range s.Mounts {
				if strings.HasPrefix(m.Destination, "/data") {
					order = append(order, m.Destination)
				}
			}
			if !reflect.DeepEqual(order, []string{"/data", "/data/sub"}) {
				t.Errorf("order %v", order)
			}
			if m := findMount(s, "/data"); !reflect.DeepEqual(m.Options, []string{"rbind", "rprivate", "ro"}) {
				t.Errorf("options %v", m.Options)
			}
		}},
		{name: "mount options", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{
				{ContainerPath: "/data", HostPath: "/h/data", Readonly: true, MountOptions: []string{"noexec", "nodev", "nosuid", "noexec"}},
				{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "sha256:abc"}, MountOptions: []string{"nodev"}},
			}
			in.ImageVolumes = map[int]string{1: "/run/berth/containers/c1/volumes/1"}
		}, check: func(t *testing.T, s *specs.Spec) {
			if m := findMount(s, "/data"); !reflect.DeepEqual(m.Options, []string{"rbind", "rprivate", "ro", "noexec", "nodev", "nosuid"}) {
				t.Errorf("options %v", m.Options)
			}
			if m := findMount(s, "/iv"); !reflect.DeepEqual(m.Options, []string{"rbind", "rprivate", "ro", "nodev"}) {
				t.Errorf("image mount options %v", m.Options)
			}
		}},
		{name: "mount option that would undo readonly", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", Readonly: true, MountOptions: []string{"noexec", "rw"}}}
		}, invalid: "mounts[0].mount_options[1]"},
		{name: "mount source that cannot be made", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/missing/x"}}
		}, invalid: "mounts[0].host_path"},
		{name: "relative mount target", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "d", HostPath: "/h"}}
		}, invalid: "mounts[0].container_path"},
		{name: "rslave on private mount", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}}
		}, invalid: "mounts[0].propagation"},
		{name: "rslave on shared mount", mod: func(in *Input) {
			in.Host = fakeHost{prop: map[string]Propagation{"/h": PropagationShared}}
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if m := findMount(s, "/d"); m.Options[1] != "rslave" || s.Linux.RootfsPropagation != "rslave" {
				t.Errorf("options %v rootfs %q", m.Options, s.Linux.RootfsPropagation)
			}
		}},
		{name: "rshared needs privileged", mod: func(in *Input) {
			in.Host = fakeHost{prop: map[string]Propagation{"/h": PropagationShared}}
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}}
		}, invalid: "mounts[0].propagation"},
		{name: "image volume", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{
				{ContainerPath: "/data", HostPath: "/h"},
				{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "sha256:abc"}},
				{ContainerPath: "/iv/sub", Readonly: true, RecursiveReadOnly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}, ImageSubPath: "etc"},
			}
			in.ImageVolumes = map[int]string{1: "/run/berth/containers/c1/volumes/1", 2: "/run/berth/containers/c1/volumes/2/etc"}
		}, check: func(t *testing.T, s *specs.Spec) {
			if m := findMount(s, "/iv"); m == nil || m.Source != "/run/berth/containers/c1/volumes/1" || m.Type != "bind" ||
				!reflect.DeepEqual(m.Options, []string{"rbind", "rprivate", "ro"}) {
				t.Errorf("image mount %+v", m)
			}
			if m := findMount(s, "/iv/sub"); m == nil || m.Source != "/run/berth/containers/c1/volumes/2/etc" || !contains(m.Options, "rro") {
				t.Errorf("image mount with sub path %+v", m)
			}
			if m := findMount(s, "/data"); m == nil || m.Source != "/h" {
				t.Errorf("host mount beside image mounts %+v", m)
			}
		}},
		{name: "image volume read-write", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/iv", Image: &runtimeapi.ImageSpec{Image: "busybox"}}}
			in.ImageVolumes = map[int]string{0: "/v"}
		}, invalid: "mounts[0].readonly"},
		{name: "image volume with host path", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/iv", HostPath: "/h", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}}}
			in.ImageVolumes = map[int]string{0: "/v"}
		}, invalid: "mounts[0].host_path"},
		{name: "image volume bidirectional", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"},
				Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}}
			in.ImageVolumes = map[int]string{0: "/v"}
		}, invalid: "mounts[0].propagation"},
		{name: "image volume not prepared", mod: func(in *Input) {
			in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}}}
		}, invalid: "-"},
		{name: "device", mod: func(in *Input) {
			in.Config.Devices = []*runtimeapi.Device{{ContainerPath: "/dev/myfuse", HostPath: "/dev/fuse", Permissions: "rw"}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/myfuse" || s.Linux.Devices[0].Major != 10 {
				t.Errorf("devices %+v", s.Linux.Devices)
			}
			if r := s.Linux.Resources.Devices; len(r) != 2 || r[0].Allow || !r[1].Allow || r[1].Access != "rw" {
				t.Errorf("device rules %+v", r)
			}
		}},
		{name: "bad device perms", mod: func(in *Input) {
			in.Config.Devices = []*runtimeapi.Device{{ContainerPath: "/dev/x", HostPath: "/dev/fuse", Permissions: "rwx"}}
		}, invalid: "devices[0].permissions"},
		{name: "missing device", mod: func(in *Input) {
			in.Config.Devices = []*runtimeapi.Device{{ContainerPath: "/dev/x", HostPath: "/dev/nope"}}
		}, invalid: "devices[0].host_path"},
		{name: "resources", mod: func(in *Input) {
			in.Host = fakeHost{ownOOM: -500}
			in.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
				CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, CpusetCpus: "0", MemoryLimitInBytes: 64 << 20, OomScoreAdj: -998,
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}},
			}}
		}, check: func(t *testing.T, s *specs.Spec) {
			r := s.Linux.Resources
			if *r.CPU.Shares != 512 || *r.CPU.Quota != 50000 || *r.CPU.Period != 100000 || r.CPU.Cpus != "0" || *r.Memory.Limit != 64<<20 {
				t.Errorf("resources %+v %+v", r.CPU, r.Memory)
			}
			if *s.Process.OOMScoreAdj != -500 || len(r.HugepageLimits) != 1 {
				t.Errorf("oom %d hugepages %v", *s.Process.OOMScoreAdj, r.HugepageLimits)
			}
		}},
		{name: "hugepage limits without a hugetlb controller", mod: func(in *Input) {
			in.Host = fakeHost{noHuge: true}
			in.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
				MemoryLimitInBytes: 64 << 20,
				HugepageLimits:     []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}, {PageSize: "1GB", Limit: 0}},
			}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if r := s.Linux.Resources; r.HugepageLimits != nil || *r.Memory.Limit != 64<<20 {
				t.Errorf("hugepages %v memory %+v", r.HugepageLimits, r.Memory)
			}
		}},
		{name: "privileged on v2: the host's cgroup namespace", mod: func(in *Input) {
			in.Host = fakeHost{v2: true}
			sc(in).Privileged = true
			in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if nsOf(s, specs.CgroupNamespace) != nil {
				t.Errorf("a privileged container has a cgroup namespace of its own")
			}
		}},
		{name: "memory limit on v1: swap as the host has it", mod: func(in *Input) {
			in.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if m := s.Linux.Resources.Memory; *m.Limit != 64<<20 || m.Swap != nil {
				t.Errorf("memory %+v", m)
			}
		}},
		{name: "memory limit on v2: no swap unless asked", mod: func(in *Input) {
			in.Host = fakeHost{v2: true}
			in.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if m := s.Linux.Resources.Memory; *m.Limit != 64<<20 || m.Swap == nil || *m.Swap != 64<<20 {
				t.Errorf("memory %+v, want swap = limit (memory.swap.max 0)", m)
			}
		}},
		{name: "memory and swap limits on v2", mod: func(in *Input) {
			in.Host = fakeHost{v2: true}
			in.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 96 << 20}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if m := s.Linux.Resources.Memory; *m.Limit != 64<<20 || *m.Swap != 96<<20 {
				t.Errorf("memory %+v", m)
			}
		}},
		{name: "unified on v1", mod: func(in *Input) {
			in.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1"}}}
		}, invalid: "linux.resources.unified"},
		{name: "unified on v2", mod: func(in *Input) {
			in.Host = fakeHost{v2: true}
			in.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1"}}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if s.Linux.Resources.Unified["memory.high"] != "1" || nsOf(s, specs.CgroupNamespace) == nil {
				t.Errorf("unified %v", s.Linux.Resources.Unified)
			}
		}},
		{name: "seccomp runtime default", mod: func(in *Input) { sc(in).Seccomp = &runtimeapi.SecurityProfile{} }, check: func(t *testing.T, s *specs.Spec) {
			sp := s.Linux.Seccomp
			if sp == nil || sp.DefaultAction != specs.ActErrno || !reflect.DeepEqual(sp.Architectures, []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}) {
				t.Fatalf("seccomp %+v", sp)
			}
			if rule := ruleFor(sp, "clone"); rule == nil || len(rule.Args) != 1 {
				t.Errorf("clone rule %+v", rule)
			}
			if ruleFor(sp, "mount") != nil || ruleFor(sp, "unshare") != nil || ruleFor(sp, "read") == nil {
				t.Errorf("mount/unshare allowed or read denied")
			}
		}},
		{name: "seccomp default with sys_admin", mod: func(in *Input) {
			sc(in).Seccomp = &runtimeapi.SecurityProfile{}
			sc(in).Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"SYS_ADMIN"}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if rule := ruleFor(s.Linux.Seccomp, "clone"); rule == nil || len(rule.Args) != 0 {
				t.Errorf("clone rule %+v", rule)
			}
			if ruleFor(s.Linux.Seccomp, "mount") == nil {
				t.Errorf("mount denied with CAP_SYS_ADMIN")
			}
		}},
		{name: "seccomp legacy path", mod: func(in *Input) { sc(in).SeccompProfilePath = "runtime/default" }, check: func(t *testing.T, s *specs.Spec) {
			if s.Linux.Seccomp == nil {
				t.Errorf("no seccomp")
			}
		}},
		{name: "seccomp unconfined", mod: func(in *Input) {
			sc(in).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
		}, check: func(t *testing.T, s *specs.Spec) {
			if s.Linux.Seccomp != nil {
				t.Errorf("seccomp %+v", s.Linux.Seccomp)
			}
		}},
		{name: "seccomp localhost", mod: func(in *Input) {
			in.Host = fakeHost{files: map[string]string{"/p.json": `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["chmod","fchmodat"],"action":"SCMP_ACT_ERRNO"}]}`}}
			sc(in).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/p.json"}
		}, check: func(t *testing.T, s *specs.Spec) {
			if sp := s.Linux.Seccomp; sp.DefaultAction != specs.ActAllow || len(sp.Syscalls) != 1 || sp.Syscalls[0].Action != specs.ActErrno {
				t.Errorf("seccomp %+v", sp)
			}
		}},
		{name: "seccomp localhost missing", mod: func(in *Input) {
			sc(in).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/nope.json"}
		}, invalid: "linux.security_context.seccomp.localhost_ref"},
		{name: "seccomp localhost garbage", mod: func(in *Input) {
			in.Host = fakeHost{files: map[string]string{"/p.json": `{`}}
			sc(in).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/p.json"}
		}, invalid: "linux.security_context.seccomp.localhost_ref"},
		{name: "bad env key", mod: func(in *Input) { in.Config.Envs = []*runtimeapi.KeyValue{{Key: "A=B"}} }, invalid: "envs[0].key"},
		{name: "env value with NUL", mod: func(in *Input) {
			in.Config.Envs = []*runtimeapi.KeyValue{{Key: "A", Value: []byte("ok")}, {Key: "B", Value: []byte("x\x00y")}}
		}, invalid: "envs[1].value"},
		{name: "env value not UTF-8", mod: func(in *Input) {
			in.Config.Envs = []*runtimeapi.KeyValue{{Key: "B", Value: []byte("\xff\xfe")}}
		}, check: func(t *testing.T, s *specs.Spec) {
			if !slices.Contains(s.Process.Env, "B=\xff\xfe") {
				t.Errorf("env %q lacks the value's bytes", s.Process.Env)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput()
			if tc.mod != nil {
				tc.mod(in)
			}
			s, err := Build(in)
			if tc.invalid == "-" {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			checkInvalid(t, err, tc.invalid)
			if tc.check != nil && err == nil {
				tc.check(t, s)
			}
		})
	}
}

func ruleFor(s *specs.LinuxSeccomp, name string) *specs.LinuxSyscall {
	for i := range s.Syscalls {
		if s.Syscalls[i].Action == specs.ActAllow && contains(s.Syscalls[i].Names, name) {
			return &s.Syscalls[i]
		}
	}
	return nil
}

func TestSandboxSpec(t *testing.T) {
	in := baseInput()
	in.ID, in.Sandbox, in.Pod.PausePID = "p1", true, 0
	in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{"net.core.somaxconn": "1024", "kernel.shmmni": "10"}}
	s, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []specs.LinuxNamespace{
		{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: "/run/berth/netns/p1"},
		{Type: specs.UTSNamespace}, {Type: specs.IPCNamespace}, {Type: specs.PIDNamespace},
	}
	if !reflect.DeepEqual(s.Linux.Namespaces, want) {
		t.Errorf("namespaces %+v, want %+v", s.Linux.Namespaces, want)
	}
	if s.Hostname != "podhost" || s.Linux.CgroupsPath != "/kubepods/podu/p1" || s.Annotations[AnnotationContainerType] != "sandbox" {
		t.Errorf("hostname %q cgroup %q type %q", s.Hostname, s.Linux.CgroupsPath, s.Annotations[AnnotationContainerType])
	}
	if len(s.Linux.Sysctl) != 2 {
		t.Errorf("sysctls %v", s.Linux.Sysctl)
	}

	// Host network, IPC and PID: only the mount namespace is its own, and
	// the node's hostname is not touched.
	in = baseInput()
	in.Sandbox, in.Pod.NetNSPath = true, ""
	in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE},
	}}
	if s, err = Build(in); err != nil {
		t.Fatal(err)
	}
	if len(s.Linux.Namespaces) != 1 || s.Hostname != "" {
		t.Errorf("host pod's infra: namespaces %+v hostname %q", s.Linux.Namespaces, s.Hostname)
	}
}

// parentOf is a cgroup parent the tests know to be valid.
func parentOf(d cgroup.Driver, name string) cgroup.Parent {
	p, err := d.Parent(name)
	if err != nil {
		panic(err)
	}
	return p
}
