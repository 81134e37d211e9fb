package sandbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/opencontainers/cgroups"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/network"
	"github.com/berth-runtime/berth/network/cnitest"
)

type fixture struct {
	t      *testing.T
	state  string
	net    *cnitest.Net
	cni    *network.CNI
	m      *Manager
	parent string // cgroup parent of the test's pods
	opts   Options
}

func newFixture(t *testing.T, netw Network) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	f := &fixture{t: t, state: t.TempDir(), parent: "/berth-test-" + reserve.NewID()[:8]}
	if netw == nil {
		f.net = cnitest.NewNet(t)
		c, err := network.NewCNI(network.Config{ConfDir: f.net.ConfDir, BinDirs: []string{f.net.BinDir}, CacheDir: filepath.Join(f.state, "cni")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.cni, netw = c, c
	}
	f.opts = Options{StateDir: f.state, Network: netw, Logger: testLogger(t),
		hosts: hostSource{Hosts: "/etc/hosts", Resolv: "/etc/resolv.conf"}}
	f.start()
	t.Cleanup(func() {
		ctx := context.Background()
		for _, p := range f.m.List(ctx, nil) {
			f.m.Remove(ctx, p.Id)
		}
		f.m.Close()
		// A test that failed half-way may have left pause processes.
		if cg, err := cgroupAt(f.parent); err == nil {
			cg.KillAll(ctx)
			for _, dir := range cg.mgr.GetPaths() {
				removeCgroupTree(dir)
			}
		}
	})
	return f
}

func (f *fixture) start() {
	f.t.Helper()
	m, err := New(context.Background(), f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.m = m
}

// restart is berth going away and coming back: pods keep running.
func (f *fixture) restart() {
	f.t.Helper()
	f.m.Close()
	f.start()
}

func (f *fixture) config(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "test", Uid: "uid-" + name},
		Hostname:  name,
		Labels:    map[string]string{"app": name, "tier": "test"},
		DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"test.svc"}},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: f.parent,
			Sysctls:      map[string]string{"net.ipv4.ip_unprivileged_port_start": "1000", "kernel.shmmni": "1234"},
		},
	}
}

func (f *fixture) run(cfg *runtimeapi.PodSandboxConfig) string {
	f.t.Helper()
	id, err := f.m.Run(context.Background(), cfg, "")
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) status(id string) *runtimeapi.PodSandboxStatus {
	f.t.Helper()
	st, _, err := f.m.Status(context.Background(), id, false)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// hostNS is the inode of the calling thread's namespace: /proc/self is
// the main thread, which a test may have left elsewhere.
func hostNS(t *testing.T, typ string) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return nsInode(t, "/proc/thread-self/ns/"+typ)
}

func readSysctlIn(t *testing.T, pid int, nsType, name string) string {
	t.Helper()
	// /proc/<pid>/root/proc/sys would still be the host's /proc: read
	// through a thread that joined pause's namespace instead.
	out := make(chan string, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/"+nsType, unix.O_RDONLY, 0)
		if err != nil {
			out <- err.Error()
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, nsType), unix.O_RDONLY, 0)
		if err != nil {
			out <- err.Error()
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, 0); err != nil {
			out <- err.Error()
			return
		}
		// Back to the host's namespace before the thread runs anything
		// else; if that fails the locked thread dies with the goroutine.
		defer func() {
			if unix.Setns(orig, 0) == nil {
				runtime.UnlockOSThread()
			}
		}()
		data, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		if err != nil {
			out <- err.Error()
			return
		}
		out <- strings.TrimSpace(string(data))
	}()
	return <-out
}

func (f *fixture) eventually(id string, want runtimeapi.PodSandboxState) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if f.status(id).State == want {
			return true
		}
	}
	return false
}

func removeCgroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || !strings.HasPrefix(string(data[i+1:]), " Z")
}

// assertGone checks that nothing of pod id is left on the host.
func (f *fixture) assertGone(id, cgPath string) {
	f.t.Helper()
	for _, p := range []string{filepath.Join(f.state, "sandboxes", id), filepath.Join(f.state, "sandboxes", id+".json"), filepath.Join(f.state, "netns", id)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			f.t.Errorf("%s still exists (%v)", p, err)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), id) {
		f.t.Errorf("a mount of pod %s is left", id)
	}
	if cg, err := cgroupAt(cgPath); err == nil && cg.Exists() {
		f.t.Errorf("cgroup %s still exists", cgPath)
	}
	if f.net != nil {
		if leases := f.net.Leases(f.t); len(leases) != 0 {
			f.t.Errorf("IP leases left: %v", leases)
		}
	}
}

func TestRunStopRemove(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	idA := f.run(f.config("a"))
	idB := f.run(f.config("b"))
	stA, stB := f.status(idA), f.status(idB)
	if stA.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("state = %v", stA.State)
	}
	ipA, ipB := net.ParseIP(stA.Network.Ip), net.ParseIP(stB.Network.Ip)
	if ipA == nil || ipB == nil || ipA.Equal(ipB) || !f.net.Subnet.Contains(ipA) || !f.net.Subnet.Contains(ipB) {
		t.Fatalf("IPs %v and %v: want two different IPs in %s", ipA, ipB, f.net.Subnet)
	}
	info, err := f.m.Get(ctx, idA[:12])
	if err != nil {
		t.Fatal(err)
	}
	// pause is in the pinned netns and its own UTS/IPC/PID namespaces.
	if nsInode(t, fmt.Sprintf("/proc/%d/ns/net", info.PausePid)) != nsInode(t, info.NetNS) {
		t.Error("pause is not in the pinned netns")
	}
	for _, typ := range []string{"uts", "ipc", "pid"} {
		if nsInode(t, fmt.Sprintf("/proc/%d/ns/%s", info.PausePid, typ)) == hostNS(t, typ) {
			t.Errorf("pause shares the host's %s namespace", typ)
		}
	}
	if got := readSysctlIn(t, info.PausePid, "uts", "kernel.hostname"); got != "a" {
		t.Errorf("hostname in pod = %q", got)
	}
	if got := readSysctlIn(t, info.PausePid, "net", "net.ipv4.ip_unprivileged_port_start"); got != "1000" {
		t.Errorf("net sysctl in pod = %q", got)
	}
	if got := readSysctlIn(t, info.PausePid, "ipc", "kernel.shmmni"); got != "1234" {
		t.Errorf("ipc sysctl in pod = %q", got)
	}
	if data, _ := os.ReadFile(info.Resolv); !strings.Contains(string(data), "nameserver 10.96.0.10") {
		t.Errorf("resolv.conf = %q", data)
	}
	if data, _ := os.ReadFile(info.Hosts); !strings.Contains(string(data), stA.Network.Ip+"\ta") {
		t.Errorf("hosts = %q", data)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(info.Shm, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Errorf("shm is not a tmpfs: %v", err)
	}
	cgPath := info.CgroupPath
	procs, _ := os.ReadFile(filepath.Join(cgroupHierarchy("memory"), cgPath, "cgroup.procs"))
	if strings.TrimSpace(string(procs)) != fmt.Sprint(info.PausePid) {
		t.Errorf("memory cgroup %s holds %q, want pause %d", cgPath, procs, info.PausePid)
	}

	// List and its filters.
	if got := len(f.m.List(ctx, nil)); got != 2 {
		t.Errorf("List = %d pods", got)
	}
	if got := f.m.List(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "b"}}); len(got) != 1 || got[0].Id != idB {
		t.Errorf("label filter = %v", got)
	}
	if got := f.m.List(ctx, &runtimeapi.PodSandboxFilter{Id: idA[:10]}); len(got) != 1 || got[0].Id != idA {
		t.Errorf("id prefix filter = %v", got)
	}
	checkListResponse(t, f.m, nil)
	checkListResponse(t, f.m, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "b"}})

	pid := info.PausePid
	for range 2 {
		if err := f.m.Stop(ctx, idA); err != nil {
			t.Fatal(err)
		}
	}
	if alive(pid) {
		t.Error("pause still running after stop")
	}
	if st := f.status(idA); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Network.Ip != "" {
		t.Errorf("after stop: %v %q", st.State, st.Network.Ip)
	}
	if got := f.m.List(ctx, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}); len(got) != 1 || got[0].Id != idB {
		t.Errorf("state filter = %v", got)
	}
	// The stopped pod's encoded item follows its new state.
	checkListResponse(t, f.m, nil)
	checkListResponse(t, f.m, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}})
	if leases := f.net.Leases(t); len(leases) != 1 || leases[0] != stB.Network.Ip {
		t.Errorf("leases after stopping a = %v, want only b's %s", leases, stB.Network.Ip)
	}
	if _, err := os.Stat(filepath.Join(f.state, "netns", idA)); !os.IsNotExist(err) {
		t.Error("netns pin left after stop")
	}
	for range 2 {
		if err := f.m.Remove(ctx, idA); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := f.m.Status(ctx, idA, false); err == nil {
		t.Error("Status of a removed pod succeeded")
	}
	// Remove of a running pod stops it first.
	infoB, _ := f.m.Get(ctx, idB)
	if err := f.m.Remove(ctx, idB); err != nil {
		t.Fatal(err)
	}
	f.assertGone(idA, cgPath)
	f.assertGone(idB, infoB.CgroupPath)
}

func TestHostNamespacesSkipCNI(t *testing.T) {
	// The network's only plugin would fail: a host network pod must not
	// run it.
	n := cnitest.NewNet(t)
	os.RemoveAll(n.ConfDir)
	os.MkdirAll(n.ConfDir, 0o755)
	n.WriteConf(t, "10-fail.conf", map[string]any{"cniVersion": "1.0.0", "name": n.Name, "type": "failer"})
	bins := cnitest.AddFailingPlugin(t, "failer", true)
	state := t.TempDir()
	c, err := network.NewCNI(network.Config{ConfDir: n.ConfDir, BinDirs: bins, CacheDir: filepath.Join(state, "cni")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, c)
	cfg := f.config("host")
	cfg.Linux.Sysctls = nil
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE,
	}}
	id := f.run(cfg)
	info, err := f.m.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if info.NetNS != "" || info.Shm != "" {
		t.Errorf("host pod has netns %q, shm %q", info.NetNS, info.Shm)
	}
	for _, typ := range []string{"net", "uts", "ipc", "pid"} {
		if nsInode(t, fmt.Sprintf("/proc/%d/ns/%s", info.PausePid, typ)) != hostNS(t, typ) {
			t.Errorf("host pod's pause has its own %s namespace", typ)
		}
	}
	if st := f.status(id); st.Network.Ip != "" {
		t.Errorf("host network pod has IP %q", st.Network.Ip)
	}
	if err := f.m.Remove(context.Background(), id); err != nil {
		t.Fatalf("remove host network pod (no CNI DEL expected): %v", err)
	}
	f.assertGone(id, info.CgroupPath)
}

func TestFailingPluginLeavesNothing(t *testing.T) {
	n := cnitest.NewNet(t)
	os.RemoveAll(n.ConfDir)
	os.MkdirAll(n.ConfDir, 0o755)
	n.WriteConf(t, "10-fail.conflist", map[string]any{
		"cniVersion": "1.0.0", "name": n.Name,
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": n.Bridge, "ipam": map[string]any{
				"type": "host-local", "dataDir": n.DataDir, "ranges": [][]map[string]string{{{"subnet": n.Subnet.String()}}},
			}},
			map[string]any{"type": "failer"},
		},
	})
	bins := cnitest.AddFailingPlugin(t, "failer", false)
	state := t.TempDir()
	c, err := network.NewCNI(network.Config{ConfDir: n.ConfDir, BinDirs: bins, CacheDir: filepath.Join(state, "cni")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, c)
	f.net = n
	_, err = f.m.Run(context.Background(), f.config("x"), "")
	if err == nil || !strings.Contains(err.Error(), cnitest.FailingPluginMessage) {
		t.Fatalf("Run error = %v, want the plugin's message", err)
	}
	entries, _ := os.ReadDir(filepath.Join(f.state, "sandboxes"))
	pins, _ := os.ReadDir(filepath.Join(f.state, "netns"))
	if len(entries) != 0 || len(pins) != 0 {
		t.Errorf("left behind: %d pod entries, %d pins", len(entries), len(pins))
	}
	if leases := n.Leases(t); len(leases) != 0 {
		t.Errorf("leases left: %v", leases)
	}
	for _, h := range []string{"memory", "pids", "unified", "systemd"} {
		dir := filepath.Join(cgroupHierarchy(h), f.parent)
		if kids, _ := os.ReadDir(dir); len(kids) > 0 {
			for _, k := range kids {
				if k.IsDir() {
					t.Errorf("cgroup left under %s: %s", dir, k.Name())
				}
			}
		}
	}
	// The name is free again.
	if _, held := f.m.names.Holder(nameKey(f.config("x").Metadata)); held {
		t.Error("name still reserved after a failed run")
	}
}

func TestRestartKeepsPodsAndSeesDeadPause(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	idA := f.run(f.config("a"))
	idB := f.run(f.config("b"))
	ipA := f.status(idA).Network.Ip
	infoB, _ := f.m.Get(ctx, idB)
	f.m.Close()
	// pause of b dies while berth is away.
	unix.Kill(infoB.PausePid, unix.SIGKILL)
	for alive(infoB.PausePid) {
		time.Sleep(time.Millisecond)
	}
	f.start()
	if st := f.status(idA); st.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Network.Ip != ipA {
		t.Errorf("a after restart: %v %s, want ready with %s", st.State, st.Network.Ip, ipA)
	}
	// Seen at adoption, or by the watcher a moment later when pause's
	// last threads are still exiting.
	if !f.eventually(idB, runtimeapi.PodSandboxState_SANDBOX_NOTREADY) {
		t.Errorf("b after restart: %v, want not ready", f.status(idB).State)
	}
	// A pause dying while berth runs is noticed too.
	infoA, _ := f.m.Get(ctx, idA)
	unix.Kill(infoA.PausePid, unix.SIGKILL)
	if !f.eventually(idA, runtimeapi.PodSandboxState_SANDBOX_NOTREADY) {
		t.Error("a still ready after its pause was killed")
	}
	infoA, _ = f.m.Get(ctx, idA)
	for _, id := range []string{idA, idB} {
		if err := f.m.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	f.assertGone(idA, infoA.CgroupPath)
	f.assertGone(idB, infoB.CgroupPath)
}

func TestRecoveryCleansOrphans(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	id := f.run(f.config("a"))
	info, _ := f.m.Get(ctx, id)
	f.m.Close()
	// Make it look as if berth crashed in the middle of RunPodSandbox:
	// everything exists, the record still says creating.
	rec, err := f.m.records.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.PausePid = StateCreating, 0
	if err := f.m.records.Put(id, rec); err != nil {
		t.Fatal(err)
	}
	// And a pin with no record at all.
	orphan, err := f.m.netns.Create(ctx, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	f.start()
	if _, _, err := f.m.Status(ctx, id, false); err == nil {
		t.Error("half-made pod survived recovery")
	}
	if alive(info.PausePid) {
		t.Error("pause of the half-made pod still runs")
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Error("orphaned pin survived recovery")
	}
	f.assertGone(id, info.CgroupPath)
}

// slowNet holds Setup until released, to catch a RunPodSandbox mid-way.
type slowNet struct {
	started chan struct{}
	release chan struct{}
	calls   int
}

func (s *slowNet) Setup(ctx context.Context, p *network.Pod) (*network.Result, error) {
	s.calls++
	close(s.started)
	<-s.release
	return &network.Result{IPs: []net.IP{net.ParseIP("10.9.9.9")}}, nil
}
func (s *slowNet) Teardown(context.Context, *network.Pod) error          { return nil }
func (s *slowNet) GC(context.Context, map[string]bool) ([]string, error) { return nil, nil }
func (s *slowNet) SetPodCIDRs([]string) error                            { return nil }

func TestRetriedRunReturnsFirstPod(t *testing.T) {
	sn := &slowNet{started: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, sn)
	cfg := f.config("r")
	type result struct {
		id  string
		err error
	}
	first := make(chan result, 1)
	go func() {
		// The kubelet's call times out long before the pod is ready.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		id, err := f.m.Run(ctx, cfg, "")
		first <- result{id, err}
	}()
	<-sn.started
	// A retry while the first is still at work waits for it.
	second := make(chan result, 1)
	go func() {
		id, err := f.m.Run(context.Background(), cfg, "")
		second <- result{id, err}
	}()
	time.Sleep(100 * time.Millisecond)
	close(sn.release)
	r1, r2 := <-first, <-second
	// The first caller returns at its deadline, told where the work is;
	// the work goes on, and the retry gets its pod.
	if !errors.Is(r1.err, context.DeadlineExceeded) || !strings.Contains(r1.err.Error(), `at step "`) {
		t.Fatalf("first call: %v, want DeadlineExceeded naming the step", r1.err)
	}
	if r2.err != nil || r2.id == "" || !strings.Contains(r1.err.Error(), r2.id) {
		t.Fatalf("first %+v, retry %+v: want the retry to get the pod the first names", r1, r2)
	}
	// A retry after it finished gets it as well.
	id3, err := f.m.Run(context.Background(), cfg, "")
	if err != nil || id3 != r2.id || sn.calls != 1 {
		t.Fatalf("late retry = %s, %v (%d setups); want %s", id3, err, sn.calls, r2.id)
	}
	if got := len(f.m.List(context.Background(), nil)); got != 1 {
		t.Fatalf("%d pods, want 1", got)
	}
	// A new attempt is a new pod.
	cfg2 := f.config("r")
	cfg2.Metadata.Attempt = 1
	sn.started = make(chan struct{})
	if _, err := f.m.Run(context.Background(), cfg2, ""); err != nil {
		t.Fatal(err)
	}
	if got := len(f.m.List(context.Background(), nil)); got != 2 {
		t.Fatalf("%d pods, want 2", got)
	}
}

var _ = ns.GetNS

// TestStandalonePauseBinary runs a pod with cmd/berth-pause, as berth does
// when the binary is installed next to it.
func TestStandalonePauseBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/berth-pause")
	}
	bin := filepath.Join(t.TempDir(), "berth-pause")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/berth-runtime/berth/cmd/berth-pause").CombinedOutput()
	if err != nil {
		t.Fatalf("build berth-pause: %v\n%s", err, out)
	}
	f := newFixture(t, nil)
	f.m.pause = &DirectPause{Command: []string{bin}}
	id := f.run(f.config("small"))
	info, err := f.m.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", info.PausePid)); exe != bin {
		t.Errorf("pause runs %s, want %s", exe, bin)
	}
	if got := readSysctlIn(t, info.PausePid, "uts", "kernel.hostname"); got != "small" {
		t.Errorf("hostname = %q", got)
	}
	if got := readSysctlIn(t, info.PausePid, "net", "net.ipv4.ip_unprivileged_port_start"); got != "1000" {
		t.Errorf("net.ipv4.ip_unprivileged_port_start = %q", got)
	}
	if got := readSysctlIn(t, info.PausePid, "ipc", "kernel.shmmni"); got != "1234" {
		t.Errorf("kernel.shmmni = %q", got)
	}
	// Built with cgo, berth-pause is its C part alone: one thread, no Go
	// runtime.
	if status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", info.PausePid)); !strings.Contains(string(status), "\nThreads:\t1\n") {
		t.Errorf("pause runs more than one thread (the Go runtime?):\n%s", status)
	}
	if err := f.m.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	f.assertGone(id, info.CgroupPath)

	// An error inside pause reaches the caller.
	cfg := f.config("bad-sysctl")
	cfg.Linux.Sysctls = map[string]string{"net.ipv4.no_such_sysctl": "1"}
	if _, err := f.m.Run(context.Background(), cfg, ""); err == nil || !strings.Contains(err.Error(), "net/ipv4/no_such_sysctl") {
		t.Errorf("Run with an unknown sysctl = %v, want pause's error naming it", err)
	}
}

// checkListResponse decodes ListResponse, with its pre-encoded items, as a
// client does and compares it with List.
func checkListResponse(t *testing.T, m *Manager, f *runtimeapi.PodSandboxFilter) {
	t.Helper()
	data, err := proto.Marshal(m.ListResponse(context.Background(), f))
	if err != nil {
		t.Fatal(err)
	}
	var got runtimeapi.ListPodSandboxResponse
	if err := proto.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.ListPodSandboxResponse{Items: m.List(context.Background(), f)}
	if len(want.Items) == 0 || !proto.Equal(&got, want) {
		t.Errorf("ListResponse(%v) decodes to\n%v\nwant (List)\n%v", f, &got, want)
	}
}

// cgroupAt opens the cgroupfs cgroup at p.
func cgroupAt(p string) (*podCgroup, error) {
	cg, err := cgroup.Cgroupfs.FromSpec(p)
	if err != nil {
		return nil, err
	}
	return openCgroup(cg)
}

// stuckNet attaches, fails the ADD, and fails every DEL while refuse is
// set: the CNI side of a pod whose undo cannot finish.
type stuckNet struct {
	mu       sync.Mutex
	refuse   bool
	attached map[string]bool
}

func (s *stuckNet) Setup(_ context.Context, p *network.Pod) (*network.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attached[p.ID] = true
	return nil, fmt.Errorf("pod %s: CNI ADD: test plugin fails after attaching; the DEL undoing it failed too, %w: refused", p.ID, network.ErrStillAttached)
}
func (s *stuckNet) Teardown(_ context.Context, p *network.Pod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse {
		return fmt.Errorf("pod %s: CNI DEL refused", p.ID)
	}
	delete(s.attached, p.ID)
	return nil
}
func (s *stuckNet) GC(context.Context, map[string]bool) ([]string, error) { return nil, nil }
func (s *stuckNet) SetPodCIDRs([]string) error                            { return nil }

// TestFailedUndoKeepsPod: a RunPodSandbox whose undo fails keeps the pod,
// not ready and listed, with its name, instead of forgetting what it
// holds; a retry makes no second pod; stop retries the DEL, remove frees
// the name.
func TestFailedUndoKeepsPod(t *testing.T) {
	sn := &stuckNet{refuse: true, attached: map[string]bool{}}
	f := newFixture(t, sn)
	ctx := context.Background()
	cfg := f.config("kept")
	_, err := f.m.Run(ctx, cfg, "")
	if !errors.Is(err, reserve.ErrKept) || !errors.Is(err, network.ErrStillAttached) {
		t.Fatalf("Run: %v, want the ADD's error and ErrKept", err)
	}
	pods := f.m.List(ctx, nil)
	if len(pods) != 1 || pods[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("listed %v, want one pod not ready", pods)
	}
	id := pods[0].Id
	if !strings.Contains(err.Error(), id) {
		t.Errorf("Run's error %q does not name the pod %s", err, id)
	}
	for range 3 {
		if _, err := f.m.Run(ctx, cfg, ""); !errors.Is(err, reserve.ErrTaken) || !strings.Contains(err.Error(), id) {
			t.Fatalf("retry: %v, want ErrTaken naming %s", err, id)
		}
	}
	if n := len(sn.attached); n != 1 || len(f.m.List(ctx, nil)) != 1 {
		t.Fatalf("after retries: %d attachments, %d pods; want 1 and 1", n, len(f.m.List(ctx, nil)))
	}
	if err := f.m.Stop(ctx, id); err == nil {
		t.Fatal("stop succeeded while DEL fails")
	}
	// Kept across a restart, as recovery keeps such a pod.
	f.restart()
	if st := f.status(id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("after restart: %v", st.State)
	}
	sn.mu.Lock()
	sn.refuse = false
	sn.mu.Unlock()
	if err := f.m.Stop(ctx, id); err != nil {
		t.Fatalf("stop once DEL works: %v", err)
	}
	if err := f.m.Remove(ctx, id); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if len(sn.attached) != 0 {
		t.Fatalf("still attached: %v", sn.attached)
	}
	if _, held := f.m.names.Holder(nameKey(cfg.Metadata)); held {
		t.Fatal("name held after remove")
	}
	entries, _ := os.ReadDir(filepath.Join(f.state, "sandboxes"))
	pins, _ := os.ReadDir(filepath.Join(f.state, "netns"))
	if len(entries) != 0 || len(pins) != 0 {
		t.Errorf("left behind: %d pod entries, %d pins", len(entries), len(pins))
	}
}

// cgroupHierarchy is where a v1 controller's hierarchy is mounted, or the
// one unified tree on a v2 host, where every controller is.
func cgroupHierarchy(controller string) string {
	if cgroups.IsCgroup2UnifiedMode() {
		return "/sys/fs/cgroup"
	}
	return filepath.Join("/sys/fs/cgroup", controller)
}
