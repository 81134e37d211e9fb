package stats

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/idindex"
)

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name   string
		info   string
		v2     bool
		memory string // the memory controller's mount point, v1
		cgDir  string // where /a/b is for memory (v1) or all (v2)
	}{
		{
			name: "hybrid: v1 controllers win over the empty unified hierarchy",
			info: `32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw`,
			memory: "/sys/fs/cgroup/memory", cgDir: "/sys/fs/cgroup/memory/a/b",
		},
		{
			name:   "co-mounted cpu,cpuacct",
			info:   `25 24 0:22 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 - cgroup cgroup rw,cpu,cpuacct` + "\n" + `26 24 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory`,
			memory: "/sys/fs/cgroup/memory", cgDir: "/sys/fs/cgroup/memory/a/b",
		},
		{
			name: "v2 only",
			info: `30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate`,
			v2:   true, cgDir: "/sys/fs/cgroup/a/b",
		},
		{
			name: "v2 in a cgroup namespace rooted at /a",
			info: `30 23 0:26 /a /sys/fs/cgroup rw - cgroup2 cgroup2 rw`,
			v2:   true, cgDir: "/sys/fs/cgroup/b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseMountinfo(strings.NewReader(tt.info))
			if err != nil {
				t.Fatal(err)
			}
			if c.V2() != tt.v2 {
				t.Fatalf("V2 = %v", c.V2())
			}
			m := c.v2
			if !tt.v2 {
				mm := c.v1["memory"]
				m = &mm
				if m.point != tt.memory {
					t.Fatalf("memory at %q", m.point)
				}
				if _, ok := c.v1["cpuacct"]; !ok {
					t.Fatal("no cpuacct")
				}
			}
			if d, ok := m.dir("/a/b"); !ok || d != tt.cgDir {
				t.Fatalf("dir(/a/b) = %q %v, want %q", d, ok, tt.cgDir)
			}
		})
	}
	if _, err := parseMountinfo(strings.NewReader("1 0 0:1 / / rw - ext4 /dev/sda rw")); err == nil {
		t.Fatal("no cgroup mounted: want an error")
	}
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeV1 lays out v1 hierarchies under root and returns their Cgroups.
func fakeV1(t *testing.T, root string) *Cgroups {
	info := ""
	for i, ctl := range []string{"cpuacct", "memory", "pids"} {
		info += strings.Join([]string{"3" + string(rune('0'+i)), "1", "0:1", "/", filepath.Join(root, ctl), "rw", "-", "cgroup", "cgroup", "rw," + ctl}, " ") + "\n"
	}
	c, err := parseMountinfo(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestReadV1(t *testing.T) {
	root := t.TempDir()
	c := fakeV1(t, root)
	write(t, filepath.Join(root, "cpuacct/pod/c1"), map[string]string{"cpuacct.usage": "2500000000\n"})
	write(t, filepath.Join(root, "memory/pod/c1"), map[string]string{
		"memory.usage_in_bytes": "10000\n",
		"memory.stat": "cache 1\nrss 2\nhierarchical_memory_limit 9223372036854771712\nhierarchical_memsw_limit 9223372036854771712\n" +
			"total_cache 4000\ntotal_rss 5000\ntotal_inactive_file 3000\ntotal_pgfault 77\ntotal_pgmajfault 7\ntotal_swap 500\n",
	})
	write(t, filepath.Join(root, "pids/pod/c1"), map[string]string{"pids.current": "3\n"})
	s := c.Read("/pod/c1")
	if !s.HasCPU || s.CPU != 2500000000 || !s.HasMemory || s.MemUsage != 10000 || s.MemWorkingSet != 7000 ||
		s.MemRSS != 5000 || s.MemCache != 4000 || s.PageFaults != 77 || s.MajorPageFaults != 7 || s.MemLimit != 0 ||
		!s.HasSwap || s.SwapUsage != 500 || s.SwapLimit != 0 || !s.HasPids || s.Pids != 3 {
		t.Fatalf("sample %+v", s)
	}
	write(t, filepath.Join(root, "memory/pod/c1"), map[string]string{
		"memory.usage_in_bytes": "1000\n",
		"memory.stat":           "hierarchical_memory_limit 20000\nhierarchical_memsw_limit 30000\ntotal_inactive_file 3000\n",
	})
	if s := c.Read("/pod/c1"); s.MemLimit != 20000 || s.MemWorkingSet != 0 || s.HasSwap {
		t.Fatalf("limit %d, working set %d (inactive file above usage must give 0), swap %v without total_swap", s.MemLimit, s.MemWorkingSet, s.HasSwap)
	}
	if s := c.Read("/pod/gone"); s.HasCPU || s.HasMemory || s.HasPids {
		t.Fatalf("a missing cgroup read %+v", s)
	}
}

func TestReadV2(t *testing.T) {
	root := t.TempDir()
	c, err := parseMountinfo(strings.NewReader("30 23 0:26 / " + root + " rw - cgroup2 cgroup2 rw"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "pod/c1"), map[string]string{
		"cpu.stat":            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
		"memory.current":      "8192\n",
		"memory.max":          "max\n",
		"memory.stat":         "anon 4096\nfile 2048\ninactive_file 1024\npgfault 10\npgmajfault 1\n",
		"memory.swap.current": "0\n",
		"memory.swap.max":     "4096\n",
		"pids.current":        "2\n",
		"cpu.pressure":        "some avg10=1.50 avg60=0.00 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=4\n",
		"io.pressure":         "some avg10=0.00 avg60=0.00 avg300=0.00 total=9\n",
	})
	s := c.Read("/pod/c1")
	if !s.HasCPU || s.CPU != 1500000 || s.MemUsage != 8192 || s.MemWorkingSet != 7168 || s.MemRSS != 4096 ||
		s.MemCache != 2048 || s.MemLimit != 0 || s.PageFaults != 10 || !s.HasSwap || s.SwapLimit != 4096 || s.Pids != 2 {
		t.Fatalf("sample %+v", s)
	}
	if p := s.PSI["cpu"]; p == nil || p.Some.Avg10 != 1.5 || p.Some.Total != 123 || !p.HasFull || p.Full.Total != 4 {
		t.Fatalf("cpu pressure %+v", p)
	}
	if p := s.PSI["io"]; p == nil || p.HasFull || p.Some.Total != 9 {
		t.Fatalf("io pressure %+v", p)
	}
}

func TestCPURates(t *testing.T) {
	r := newCPURates()
	t0 := time.Unix(100, 0)
	tests := []struct {
		name  string
		usage uint64
		at    time.Duration
		want  int64 // -1: unset
	}{
		{"first sample has no rate", 1e9, 0, -1},
		{"half a core over 2s", 2e9, 2 * time.Second, 5e8},
		{"a call within the minimum window repeats the last rate", 2.1e9, 2500 * time.Millisecond, 5e8},
		{"the window runs from the last rated sample", 4e9, 4 * time.Second, 1e9},
		{"a counter going back starts over", 1e6, 5 * time.Second, -1},
	}
	for _, tt := range tests {
		got := r.rate("k", tt.usage, t0.Add(tt.at))
		if (got == nil) != (tt.want < 0) || (got != nil && int64(*got) != tt.want) {
			t.Fatalf("%s: got %v, want %d", tt.name, got, tt.want)
		}
	}
	r.prune(t0.Add(time.Hour))
	if len(r.last) != 0 {
		t.Fatal("stale samples kept")
	}
}

func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), make([]byte, 10000), 0o644)
	os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "hardlink"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "b"), []byte("x"), 0o644)
	b, n := walk(dir, func(string) {})
	if n != 4 { // dir, a (once), sub, b
		t.Fatalf("inodes %d, want 4", n)
	}
	if b < 10000 {
		t.Fatalf("bytes %d", b)
	}
	d := newDiskUsage(time.Hour, nil)
	now := time.Now()
	ctx := context.Background()
	b1, _, at, err := d.get(ctx, dir, now)
	if err != nil || b1 != b || at.IsZero() {
		t.Fatalf("first get %d at %v", b1, at)
	}
	os.WriteFile(filepath.Join(dir, "c"), make([]byte, 1<<20), 0o644)
	if b2, _, _, _ := d.get(ctx, dir, now.Add(time.Minute)); b2 != b1 {
		t.Fatalf("a fresh entry was walked again: %d", b2)
	}
	// Stale: the caller gets the old value at once, a walk updates it.
	if b3, _, _, _ := d.get(ctx, dir, now.Add(2*time.Hour)); b3 != b1 {
		t.Fatalf("a stale get waited for the walk: %d", b3)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.mu.Lock()
		e := d.entries[dir]
		done := e.walk == nil && e.bytes > b1
		d.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("background walk never updated the entry")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDiskUsageStuckWalk: a first walk that does not return fails the
// caller within a second, naming where it is stuck, and a second caller
// at once; no second walk starts beside it; once it returns, its result
// is served.
func TestDiskUsageStuckWalk(t *testing.T) {
	release := make(chan struct{})
	var walks atomic.Int32
	d := newDiskUsage(time.Hour, nil)
	d.walk = func(dir string, at func(string)) (uint64, uint64) {
		walks.Add(1)
		at(dir + "/stuck")
		<-release
		return 4096, 1
	}
	ctx := context.Background()
	start := time.Now()
	_, _, _, err := d.get(ctx, "/layer", time.Now())
	if err == nil || !strings.Contains(err.Error(), "/layer/stuck") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first get of a stuck layer: %v", err)
	}
	if took := time.Since(start); took > 2*firstWait {
		t.Errorf("first get took %s", took)
	}
	start = time.Now()
	if _, _, _, err := d.get(ctx, "/layer", time.Now()); err == nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("second get: %v after %s, want an error at once", err, time.Since(start))
	}
	if n := walks.Load(); n != 1 {
		t.Errorf("%d walks of a stuck dir, want 1", n)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, _, _, err := d.get(ctx, "/layer", time.Now()); err == nil {
			if b != 4096 {
				t.Errorf("after the walk returned: %d bytes", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the walk's late result is never served")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDiskUsageStaysOnItsFilesystem: a mount below a writable layer
// (here a tmpfs; in the field, a FUSE mount that may never answer) is not
// walked into.
func TestDiskUsageStaysOnItsFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	os.WriteFile(filepath.Join(mnt, "big"), make([]byte, 1<<20), 0o644)
	var visited []string
	b, n := walk(dir, func(p string) { visited = append(visited, p) })
	if n != 1 || b >= 1<<20 {
		t.Errorf("walk counted %d inodes, %d bytes, want only the dir itself", n, b)
	}
	if slices.Contains(visited, mnt) {
		t.Errorf("walk looked at the mount point %s", mnt)
	}
}

func TestParseNetDev(t *testing.T) {
	got := parseNetDev(`Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0
  eth0:    1296      16    1    2    0     0          0         0     1164      14    3    4    0     0       0          0
`)
	if len(got) != 1 {
		t.Fatalf("got %+v", got)
	}
	want := Iface{Name: "eth0", RxBytes: 1296, RxPackets: 16, RxErrors: 1, RxDrop: 2, TxBytes: 1164, TxPackets: 14, TxErrors: 3, TxDrop: 4}
	if got[0] != want {
		t.Fatalf("got %+v", got[0])
	}
}

type fakeSource struct {
	ctrs []Container
	pods []Pod
}

func (f fakeSource) StatsContainers() []Container { return f.ctrs }
func (f fakeSource) StatsPods() []Pod             { return f.pods }

func TestCollector(t *testing.T) {
	root := t.TempDir()
	cg := fakeV1(t, root)
	for _, c := range []struct{ path, cpu, mem string }{
		{"/berth/pause1", "1000", "100"},
		{"/berth/c1", "2000", "200"},
		{"/berth/c2", "4000", "400"},
		{"/kubepods/pod2", "9000", "900"},
		{"/kubepods/pod2/c3", "8000", "800"},
	} {
		write(t, filepath.Join(root, "cpuacct", c.path), map[string]string{"cpuacct.usage": c.cpu})
		write(t, filepath.Join(root, "memory", c.path), map[string]string{"memory.usage_in_bytes": c.mem, "memory.stat": "total_rss 1\n"})
		write(t, filepath.Join(root, "pids", c.path), map[string]string{"pids.current": "1"})
	}
	layer := t.TempDir()
	os.WriteFile(filepath.Join(layer, "f"), make([]byte, 5000), 0o644)
	src := fakeSource{
		ctrs: []Container{
			{ID: "c1", PodID: "pod1", Cgroup: "/berth/c1", WritableLayer: layer, Running: true, Labels: map[string]string{"app": "a"}, Metadata: &runtimeapi.ContainerMetadata{Name: "one"}},
			{ID: "c2", PodID: "pod1", Cgroup: "/berth/c2", Running: true, Labels: map[string]string{"app": "b"}},
			{ID: "c3", PodID: "pod2", Cgroup: "/kubepods/pod2/c3", Running: true},
			{ID: "c4", PodID: "pod2", Cgroup: "/kubepods/pod2/gone", Running: false},
		},
		pods: []Pod{
			{ID: "pod1", Ready: true, PauseCgroup: "/berth/pause1", Labels: map[string]string{"tier": "x"}, Metadata: &runtimeapi.PodSandboxMetadata{Name: "p1", Namespace: "ns"}},
			{ID: "pod2", Ready: true, Cgroup: "/kubepods/pod2", PauseCgroup: "/kubepods/pod2/pause"},
			{ID: "pod3", Ready: false},
		},
	}
	c, err := New(Options{Containers: src, Pods: src, LayerRoot: layer, cgroups: cg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := func(list []*runtimeapi.ContainerStats) string {
		var s []string
		for _, x := range list {
			s = append(s, x.Attributes.Id)
		}
		return strings.Join(s, ",")
	}
	filters := []struct {
		f    *runtimeapi.ContainerStatsFilter
		want string
	}{
		{nil, "c1,c2,c3"},
		{&runtimeapi.ContainerStatsFilter{Id: "c1"}, "c1"},
		{&runtimeapi.ContainerStatsFilter{PodSandboxId: "pod2"}, "c3"},
		{&runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": "b"}}, "c2"},
		{&runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": "zzz"}}, ""},
	}
	for _, f := range filters {
		if got := ids(c.ListContainerStats(ctx, f.f)); got != f.want {
			t.Errorf("filter %v: %s, want %s", f.f, got, f.want)
		}
	}
	st, err := c.ContainerStats(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Cpu.UsageCoreNanoSeconds.Value != 2000 || st.Memory.WorkingSetBytes.Value != 200 || st.WritableLayer.UsedBytes.Value < 5000 ||
		st.WritableLayer.InodesUsed.Value != 2 || st.WritableLayer.FsId.Mountpoint == "" || st.Attributes.Metadata.Name != "one" {
		t.Fatalf("c1: %v", st)
	}
	if st, err := c.ContainerStats(ctx, "c4"); err != nil || st.Cpu != nil || st.Memory != nil {
		t.Fatalf("exited c4: %v %v", st, err)
	}
	if _, err := c.ContainerStats(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing container: %v, want not found", err)
	}
	if _, err := c.ContainerStats(ctx, "c"); !errors.Is(err, idindex.ErrAmbiguous) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "c1, c2, c3, c4") {
		t.Fatalf("ambiguous prefix: %v, want ambiguous naming c1-c4", err)
	}
	if _, err := c.PodSandboxStats(ctx, "pod"); !errors.Is(err, idindex.ErrAmbiguous) || errors.Is(err, ErrNotFound) {
		t.Fatalf("ambiguous pod prefix: %v, want ambiguous", err)
	}

	pods := c.ListPodSandboxStats(ctx, nil)
	if len(pods) != 2 {
		t.Fatalf("%d pods, want the 2 ready ones", len(pods))
	}
	// pod1 has no cgroup of its own: pause + its containers.
	p1 := pods[0].Linux
	if p1.Cpu.UsageCoreNanoSeconds.Value != 7000 || p1.Memory.WorkingSetBytes.Value != 700 || p1.Process.ProcessCount.Value != 3 || len(p1.Containers) != 2 {
		t.Fatalf("pod1: %v", p1)
	}
	// pod2 has: read as a whole.
	p2 := pods[1].Linux
	if p2.Cpu.UsageCoreNanoSeconds.Value != 9000 || len(p2.Containers) != 1 {
		t.Fatalf("pod2: %v", p2)
	}
	if got := c.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"tier": "x"}}); len(got) != 1 || got[0].Attributes.Id != "pod1" {
		t.Fatalf("label filter: %v", got)
	}
	if _, err := c.PodSandboxStats(ctx, "pod9"); err == nil {
		t.Fatal("missing pod: no error")
	}

	descs := map[string][]string{}
	for _, d := range c.MetricDescriptors() {
		descs[d.Name] = d.LabelKeys
	}
	for _, name := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_rss", "container_network_receive_bytes_total"} {
		if _, ok := descs[name]; !ok {
			t.Errorf("no descriptor %s", name)
		}
	}
	metrics := c.PodSandboxMetrics(ctx)
	if len(metrics) != 2 || len(metrics[0].ContainerMetrics) != 2 {
		t.Fatalf("metrics %v", metrics)
	}
	for _, pm := range metrics {
		for _, cm := range pm.ContainerMetrics {
			for _, m := range cm.Metrics {
				keys, ok := descs[m.Name]
				if !ok || len(keys) != len(m.LabelValues) {
					t.Fatalf("metric %s: labels %v for keys %v", m.Name, m.LabelValues, keys)
				}
			}
		}
	}
}

func TestNetworkUsage(t *testing.T) {
	at := time.Unix(100, 0)
	for _, tc := range []struct {
		name        string
		ifaces      []Iface
		wantDefault string
		wantAll     []string
	}{
		{name: "none", ifaces: nil},
		{name: "eth0 only", ifaces: []Iface{{Name: "eth0", RxBytes: 10}}, wantDefault: "eth0", wantAll: []string{"eth0"}},
		{name: "two", ifaces: []Iface{{Name: "net1"}, {Name: "eth0"}}, wantDefault: "eth0", wantAll: []string{"net1", "eth0"}},
		{name: "no eth0", ifaces: []Iface{{Name: "net1"}}, wantAll: []string{"net1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := networkUsage(tc.ifaces, at)
			if n.Timestamp != at.UnixNano() {
				t.Errorf("timestamp %d", n.Timestamp)
			}
			if got := n.DefaultInterface.GetName(); got != tc.wantDefault {
				t.Errorf("default interface %q, want %q", got, tc.wantDefault)
			}
			var all []string
			for _, i := range n.Interfaces {
				all = append(all, i.Name)
			}
			if !slices.Equal(all, tc.wantAll) {
				t.Errorf("interfaces %v, want %v", all, tc.wantAll)
			}
		})
	}
}
