package nri

import (
	"errors"
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// baseSpec is shaped like the specs berth builds (container/spec).
func baseSpec() *rspec.Spec {
	adj := 100
	shares := uint64(512)
	limit := int64(64 << 20)
	return &rspec.Spec{
		Process: &rspec.Process{
			Args:        []string{"/bin/sh", "-c", "sleep 1"},
			Env:         []string{"PATH=/usr/bin:/bin", "HOME=/root", "KEEP=1"},
			OOMScoreAdj: &adj,
			Rlimits:     []rspec.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		},
		Annotations: map[string]string{"io.kubernetes.cri.container-name": "c", "drop.me": "x"},
		Mounts: []rspec.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/dev/shm", Type: "bind", Source: "/run/pod/shm", Options: []string{"rbind"}},
			{Destination: "/etc/hosts", Type: "bind", Source: "/run/pod/hosts", Options: []string{"rbind", "ro"}},
		},
		Linux: &rspec.Linux{
			CgroupsPath: "/kubepods/pod1/c1",
			Namespaces: []rspec.LinuxNamespace{
				{Type: rspec.NetworkNamespace, Path: "/run/netns/pod1"},
				{Type: rspec.MountNamespace},
				{Type: rspec.PIDNamespace},
			},
			Resources: &rspec.LinuxResources{
				Devices: []rspec.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				CPU:     &rspec.LinuxCPU{Shares: &shares},
				Memory:  &rspec.LinuxMemory{Limit: &limit},
			},
			Sysctl: map[string]string{"net.ipv4.ip_forward": "1"},
		},
	}
}

func envOf(s *rspec.Spec) map[string]string {
	m := map[string]string{}
	for _, e := range s.Process.Env {
		for i := range e {
			if e[i] == '=' {
				m[e[:i]] = e[i+1:]
				break
			}
		}
	}
	return m
}

func mountAt(s *rspec.Spec, dest string) *rspec.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dest {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestAdjustSpecNil(t *testing.T) {
	s := baseSpec()
	if err := AdjustSpec(s, nil, Host{}); err != nil {
		t.Fatal(err)
	}
	if len(s.Process.Env) != 3 || len(s.Mounts) != 4 {
		t.Fatalf("a nil adjustment changed the spec: %+v", s)
	}
}

func TestAdjustSpecEnvArgsAnnotations(t *testing.T) {
	s := baseSpec()
	a := &api.ContainerAdjustment{}
	a.AddEnv("HOME", "/home/nri") // replaced in place
	a.AddEnv("NEW", "v")          // appended
	a.RemoveEnv("KEEP")
	a.SetArgs([]string{"/bin/true"})
	a.AddAnnotation("nri.example/added", "yes")
	a.RemoveAnnotation("drop.me")
	if err := AdjustSpec(s, a, Host{}); err != nil {
		t.Fatal(err)
	}
	env := envOf(s)
	if env["HOME"] != "/home/nri" || env["NEW"] != "v" || env["PATH"] != "/usr/bin:/bin" {
		t.Errorf("env = %v", s.Process.Env)
	}
	if _, ok := env["KEEP"]; ok {
		t.Errorf("KEEP not removed: %v", s.Process.Env)
	}
	if s.Process.Env[0] != "PATH=/usr/bin:/bin" || s.Process.Env[1] != "HOME=/home/nri" {
		t.Errorf("existing variables moved: %v", s.Process.Env)
	}
	if !slices.Equal(s.Process.Args, []string{"/bin/true"}) {
		t.Errorf("args = %v", s.Process.Args)
	}
	if s.Annotations["nri.example/added"] != "yes" || s.Annotations["io.kubernetes.cri.container-name"] != "c" {
		t.Errorf("annotations = %v", s.Annotations)
	}
	if _, ok := s.Annotations["drop.me"]; ok {
		t.Errorf("drop.me not removed: %v", s.Annotations)
	}
}

func TestAdjustSpecMounts(t *testing.T) {
	s := baseSpec()
	a := &api.ContainerAdjustment{}
	a.AddMount(&api.Mount{Destination: "/data/cache", Type: "bind", Source: "/var/cache/x", Options: []string{"rbind", "rprivate", "ro"}})
	a.AddMount(&api.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m"}})
	a.RemoveMount("/etc/hosts")
	if err := AdjustSpec(s, a, Host{}); err != nil {
		t.Fatal(err)
	}
	if m := mountAt(s, "/data/cache"); m == nil || m.Source != "/var/cache/x" || !slices.Contains(m.Options, "ro") {
		t.Errorf("added mount: %+v", m)
	}
	if m := mountAt(s, "/dev/shm"); m == nil || m.Type != "tmpfs" {
		t.Errorf("replaced mount: %+v", m)
	}
	if mountAt(s, "/etc/hosts") != nil {
		t.Errorf("/etc/hosts not removed")
	}
	n := 0
	for _, m := range s.Mounts {
		if m.Destination == "/dev/shm" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d mounts on /dev/shm", n)
	}
	// Parents before children, whatever the order of the adjustment.
	idx := func(d string) int {
		return slices.IndexFunc(s.Mounts, func(m rspec.Mount) bool { return m.Destination == d })
	}
	if idx("/dev") > idx("/dev/shm") || idx("/proc") > idx("/data/cache") {
		t.Errorf("mount order: %v", s.Mounts)
	}
}

func TestAdjustSpecDevicesHooksRlimits(t *testing.T) {
	s := baseSpec()
	a := &api.ContainerAdjustment{}
	a.AddDevice(&api.LinuxDevice{Path: "/dev/nri-null", Type: "c", Major: 1, Minor: 3, FileMode: api.FileMode(0o666)})
	a.AddHooks(&api.Hooks{
		Prestart:        []*api.Hook{{Path: "/bin/prestart"}},
		CreateRuntime:   []*api.Hook{{Path: "/bin/create-runtime", Args: []string{"create-runtime", "x"}}},
		CreateContainer: []*api.Hook{{Path: "/bin/create-container"}},
		StartContainer:  []*api.Hook{{Path: "/bin/start-container"}},
		Poststart:       []*api.Hook{{Path: "/bin/poststart"}},
		Poststop:        []*api.Hook{{Path: "/bin/poststop", Timeout: api.Int(5)}},
	})
	a.AddRlimit("RLIMIT_NPROC", 200, 100)
	a.AddRlimit("RLIMIT_NOFILE", 4321, 4321) // replaces the spec's
	if err := AdjustSpec(s, a, Host{}); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(s.Linux.Devices, func(d rspec.LinuxDevice) bool { return d.Path == "/dev/nri-null" })
	if i < 0 || s.Linux.Devices[i].Major != 1 || s.Linux.Devices[i].Minor != 3 || s.Linux.Devices[i].Type != "c" {
		t.Fatalf("device node: %+v", s.Linux.Devices)
	}
	rules := s.Linux.Resources.Devices
	last := rules[len(rules)-1]
	if !last.Allow || last.Type != "c" || last.Major == nil || *last.Major != 1 || *last.Minor != 3 || last.Access != "rw" {
		t.Errorf("device cgroup rule: %+v", rules)
	}
	h := s.Hooks
	if h == nil || len(h.Prestart) != 1 || len(h.CreateRuntime) != 1 || len(h.CreateContainer) != 1 ||
		len(h.StartContainer) != 1 || len(h.Poststart) != 1 || len(h.Poststop) != 1 {
		t.Fatalf("hooks: %+v", h)
	}
	if h.Poststop[0].Timeout == nil || *h.Poststop[0].Timeout != 5 || h.CreateRuntime[0].Args[1] != "x" {
		t.Errorf("hook details: %+v %+v", h.Poststop[0], h.CreateRuntime[0])
	}
	if len(s.Process.Rlimits) != 2 || !slices.Contains(s.Process.Rlimits, rspec.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: 200, Soft: 100}) ||
		!slices.Contains(s.Process.Rlimits, rspec.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: 4321, Soft: 4321}) {
		t.Errorf("rlimits: %+v", s.Process.Rlimits)
	}

	// A device removed by a later adjustment goes, node and all.
	b := &api.ContainerAdjustment{}
	b.RemoveDevice("/dev/nri-null")
	if err := AdjustSpec(s, b, Host{}); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(s.Linux.Devices, func(d rspec.LinuxDevice) bool { return d.Path == "/dev/nri-null" }) {
		t.Errorf("device not removed: %+v", s.Linux.Devices)
	}
}

func TestAdjustSpecResources(t *testing.T) {
	s := baseSpec()
	a := &api.ContainerAdjustment{}
	a.SetLinuxCPUShares(2048)
	a.SetLinuxCPUQuota(50000)
	a.SetLinuxCPUPeriod(100000)
	a.SetLinuxCPUSetCPUs("0")
	a.SetLinuxCPUSetMems("0")
	a.SetLinuxMemoryLimit(128 << 20)
	a.SetLinuxPidLimits(64)
	a.AddLinuxHugepageLimit("2MB", 4<<20)
	a.SetLinuxCgroupsPath("/nri/c1")
	adj := 500
	a.SetLinuxOomScoreAdj(&adj)
	a.SetLinuxSysctl("net.core.somaxconn", "1024")
	if err := AdjustSpec(s, a, Host{}); err != nil {
		t.Fatal(err)
	}
	r := s.Linux.Resources
	if *r.CPU.Shares != 2048 || *r.CPU.Quota != 50000 || *r.CPU.Period != 100000 || r.CPU.Cpus != "0" || r.CPU.Mems != "0" {
		t.Errorf("cpu: %+v", r.CPU)
	}
	// The limit without swap: swap follows it (no swap).
	if *r.Memory.Limit != 128<<20 || r.Memory.Swap == nil || *r.Memory.Swap != 128<<20 {
		t.Errorf("memory: %+v", r.Memory)
	}
	if r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit != 64 {
		t.Errorf("pids: %+v", r.Pids)
	}
	if len(r.HugepageLimits) != 1 || r.HugepageLimits[0] != (rspec.LinuxHugepageLimit{Pagesize: "2MB", Limit: 4 << 20}) {
		t.Errorf("hugepages: %+v", r.HugepageLimits)
	}
	if s.Linux.CgroupsPath != "/nri/c1" || *s.Process.OOMScoreAdj != 500 {
		t.Errorf("cgroups path %q, oom %d", s.Linux.CgroupsPath, *s.Process.OOMScoreAdj)
	}
	if s.Linux.Sysctl["net.core.somaxconn"] != "1024" || s.Linux.Sysctl["net.ipv4.ip_forward"] != "1" {
		t.Errorf("sysctl: %v", s.Linux.Sysctl)
	}
}

func TestAdjustSpecOOMScoreClamped(t *testing.T) {
	s := baseSpec()
	a := &api.ContainerAdjustment{}
	low := -999
	a.SetLinuxOomScoreAdj(&low)
	if err := AdjustSpec(s, a, Host{MinOOMScoreAdj: -500}); err != nil {
		t.Fatal(err)
	}
	if *s.Process.OOMScoreAdj != -500 {
		t.Errorf("oom_score_adj %d, want berth's own -500", *s.Process.OOMScoreAdj)
	}
}

func TestAdjustSpecNamespaces(t *testing.T) {
	s := baseSpec()
	a := &api.ContainerAdjustment{}
	a.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "network", Path: "/run/netns/other"})
	a.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "cgroup"})
	a.RemoveNamespace(&api.LinuxNamespace{Type: "pid"})
	if err := AdjustSpec(s, a, Host{}); err != nil {
		t.Fatal(err)
	}
	want := []rspec.LinuxNamespace{
		{Type: rspec.NetworkNamespace, Path: "/run/netns/other"},
		{Type: rspec.MountNamespace},
		{Type: rspec.CgroupNamespace},
	}
	if !slices.Equal(s.Linux.Namespaces, want) {
		t.Errorf("namespaces = %+v, want %+v", s.Linux.Namespaces, want)
	}
	bad := &api.ContainerAdjustment{}
	bad.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "bogus"})
	if err := AdjustSpec(baseSpec(), bad, Host{}); err == nil {
		t.Error("unknown namespace type accepted")
	}
}

func TestAdjustSpecSeccompAndScheduler(t *testing.T) {
	s := baseSpec()
	a := &api.ContainerAdjustment{}
	a.SetLinuxSeccompPolicy(&api.LinuxSeccomp{
		DefaultAction: "SCMP_ACT_ALLOW",
		Architectures: []string{"SCMP_ARCH_X86_64"},
		Syscalls:      []*api.LinuxSyscall{{Names: []string{"mount"}, Action: "SCMP_ACT_ERRNO"}},
	})
	a.SetLinuxIOPriority(&api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_BE, Priority: 4})
	if err := AdjustSpec(s, a, Host{}); err != nil {
		t.Fatal(err)
	}
	sc := s.Linux.Seccomp
	if sc == nil || sc.DefaultAction != rspec.ActAllow || len(sc.Syscalls) != 1 || sc.Syscalls[0].Names[0] != "mount" || sc.Syscalls[0].Action != rspec.ActErrno {
		t.Errorf("seccomp: %+v", sc)
	}
	if p := s.Process.IOPriority; p == nil || p.Class != rspec.IOPRIO_CLASS_BE || p.Priority != 4 {
		t.Errorf("io priority: %+v", p)
	}
}

func TestAdjustSpecRefused(t *testing.T) {
	for name, a := range map[string]func(*api.ContainerAdjustment){
		"cdi":     func(a *api.ContainerAdjustment) { a.AddCDIDevice(&api.CDIDevice{Name: "vendor.com/gpu=0"}) },
		"blockio": func(a *api.ContainerAdjustment) { a.SetLinuxBlockIOClass("slow") },
	} {
		adj := &api.ContainerAdjustment{}
		a(adj)
		if err := AdjustSpec(baseSpec(), adj, Host{}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err = %v, want ErrUnsupported", name, err)
		}
	}
	// Unified settings need cgroup v2.
	adj := &api.ContainerAdjustment{}
	adj.AddLinuxUnified("memory.high", "1000000")
	if err := AdjustSpec(baseSpec(), adj, Host{}); err == nil {
		t.Error("unified settings accepted on cgroup v1")
	}
	s := baseSpec()
	if err := AdjustSpec(s, adj, Host{CgroupV2: true}); err != nil || s.Linux.Resources.Unified["memory.high"] != "1000000" {
		t.Errorf("unified on v2: %v %v", err, s.Linux.Resources.Unified)
	}
}

func TestAdjustSpecRDTClass(t *testing.T) {
	s := baseSpec()
	a := &api.ContainerAdjustment{}
	a.SetLinuxRDTClass("gold")
	if err := AdjustSpec(s, a, Host{}); err != nil {
		t.Fatal(err)
	}
	if s.Linux.IntelRdt == nil || s.Linux.IntelRdt.ClosID != "gold" {
		t.Errorf("rdt: %+v", s.Linux.IntelRdt)
	}
}
