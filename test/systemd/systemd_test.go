// Package systemd tests berth's systemd cgroup driver against a real
// systemd: pods' and containers' cgroups are transient scopes systemd made
// (asked over D-Bus), resources are set through their units, and nothing
// is left behind, through a restart and a crash of berth. Where systemd
// does not answer (this repository's test VM) those tests skip, and the
// one that runs instead checks that berth refuses to start with the
// driver. A systemd container of the kind node image is where they run
// (docs/kubelet.md, "Cgroup driver").
package systemd

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/opencontainers/cgroups"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// requireSystemd skips t unless systemd answers on D-Bus, and returns a
// connection to ask it about units.
func requireSystemd(t *testing.T) *sdbus.Conn {
	t.Helper()
	framework.RequireRoot(t)
	if err := cgroup.Systemd.Check(framework.Ctx(t)); err != nil {
		t.Skipf("needs systemd as init, on D-Bus (run it in a systemd container of the kind node image): %v", err)
	}
	// Not the test's context: the connection outlives it, for the
	// cleanups that check what is left.
	conn, err := sdbus.NewWithContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// Without systemd the daemon refuses the driver at start, in one line,
// and leaves no socket.
func TestRefusedWithoutSystemd(t *testing.T) {
	t.Parallel()
	if err := cgroup.Systemd.Check(framework.Ctx(t)); err == nil {
		t.Skip("systemd answers here: the driver works")
	}
	framework.Binary(t) // built outside RunBerth's time limit
	dir := framework.TempDir(t)
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("cgroup_driver = \"systemd\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "berth.sock")
	res := framework.RunBerth(t, "--config", cfg, "--address", sock, "--root", filepath.Join(dir, "root"),
		"--state", filepath.Join(dir, "state"), "--cni-conf-dir", filepath.Join(dir, "net.d"))
	if res.ExitCode == 0 {
		t.Fatalf("berth started with the systemd driver and no systemd; stderr %q", res.Stderr)
	}
	if !strings.Contains(res.Stderr, "cgroup driver systemd: systemd is not running") {
		t.Errorf("stderr %q does not say why", res.Stderr)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("a socket was created")
	}
}

// env is a berth with the systemd driver, busybox imported, and pods in a
// slice of the test's own (what the kubelet's pod slice is to a node).
type env struct {
	t     *testing.T
	d     *framework.Daemon
	sd    *sdbus.Conn
	slice string
	image string
	v2    bool
	ids   []string // every pod and container made: none may keep a unit
}

func newEnv(t *testing.T) *env {
	t.Helper()
	sd := requireSystemd(t)
	e := &env{t: t, sd: sd, slice: "berthtest" + framework.RandHex(4) + ".slice", image: "berth.test/busybox:latest", v2: cgroups.IsCgroup2UnifiedMode()}
	// Registered first, so it runs last: after the daemon's cleanup has
	// removed the pods in it. The slice is the test's (the kubelet's, on
	// a node): systemd made it for the first scope in it.
	t.Cleanup(func() {
		ctx := context.Background()
		ch := make(chan string, 1)
		if _, err := sd.StopUnitContext(ctx, e.slice, "replace", ch); err == nil {
			<-ch
		}
		sd.ResetFailedUnitContext(ctx, e.slice)
		e.checkNoUnits()
	})
	// Host network: the cgroups are the point, not CNI.
	e.d = framework.StartDaemon(t, framework.WithArgs("--cgroup-driver", "systemd"))
	e.importBusybox()
	return e
}

// importBusybox loads the test bed's busybox (hack/build-images' OCI
// layout) through `berth images import`, named e.image: no registry needed.
func (e *env) importBusybox() {
	t := e.t
	cache := os.Getenv("BERTH_CACHE")
	if cache == "" {
		cache = "/var/cache/berth-dev"
	}
	layouts, _ := filepath.Glob(filepath.Join(cache, "images/oci/busybox/*/index.json"))
	if len(layouts) == 0 {
		t.Skipf("needs busybox's OCI layout in %s/images/oci/busybox (hack/build-images)", cache)
	}
	dir := filepath.Dir(layouts[0])
	var index struct {
		SchemaVersion int              `json:"schemaVersion"`
		MediaType     string           `json:"mediaType,omitempty"`
		Manifests     []map[string]any `json:"manifests"`
	}
	raw, err := os.ReadFile(layouts[0])
	if err == nil {
		err = json.Unmarshal(raw, &index)
	}
	if err != nil || len(index.Manifests) != 1 {
		t.Fatalf("busybox layout %s: %v (%d manifests)", dir, err, len(index.Manifests))
	}
	index.Manifests[0]["annotations"] = map[string]string{"org.opencontainers.image.ref.name": e.image}
	if raw, err = json.Marshal(index); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data := raw
		if rel != "index.json" {
			if data, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(e.d.Dir, "busybox.tar")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	res := framework.RunBerth(t, "images", "import", "--config", e.d.ConfigPath, "--address", e.d.Socket, archive)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, e.image) {
		t.Fatalf("berth images import: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func (e *env) runPod(name, parent string) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "systemd", Uid: "uid-" + name + "-" + framework.RandHex(3)},
		Hostname:     name,
		LogDirectory: e.t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: parent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	resp, err := e.d.Runtime.RunPodSandbox(framework.Ctx(e.t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatalf("RunPodSandbox %s: %v", name, err)
	}
	e.ids = append(e.ids, resp.PodSandboxId)
	return resp.PodSandboxId, cfg
}

func (e *env) runContainer(pod string, podCfg *runtimeapi.PodSandboxConfig, name, script string) string {
	e.t.Helper()
	return e.runLimited(pod, podCfg, name, script, nil)
}

// scope checks that systemd runs berth-<id>.scope in slice, holding pid
// in its cgroup (the path the kubelet and the stats read), and returns
// that path.
func (e *env) scope(id, slice string, pid int) string {
	e.t.Helper()
	ctx := framework.Ctx(e.t)
	unit := "berth-" + id + ".scope"
	props, err := e.sd.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		e.t.Fatalf("unit %s: %v", unit, err)
	}
	if props["ActiveState"] != "active" || props["LoadState"] != "loaded" {
		e.t.Fatalf("unit %s is %v/%v, want loaded/active", unit, props["LoadState"], props["ActiveState"])
	}
	sl, err := e.sd.GetUnitTypePropertyContext(ctx, unit, "Scope", "Slice")
	if err != nil || sl.Value.Value() != slice {
		e.t.Errorf("unit %s is in slice %v (%v), want %s", unit, sl, err, slice)
	}
	cg, err := e.sd.GetUnitTypePropertyContext(ctx, unit, "Scope", "ControlGroup")
	if err != nil {
		e.t.Fatal(err)
	}
	path, _ := cg.Value.Value().(string)
	want, _ := cgroup.Systemd.Parent(slice)
	if path != want.Child(id).Path() {
		e.t.Errorf("unit %s has cgroup %q, want %q", unit, path, want.Child(id).Path())
	}
	if pid > 0 {
		procs, err := os.ReadFile(e.cgroupFile(path, "memory", "cgroup.procs"))
		if err != nil || !containsLine(string(procs), strconv.Itoa(pid)) {
			e.t.Errorf("memory cgroup %s holds %q (%v), want pid %d", path, procs, err, pid)
		}
	}
	return path
}

// cgroupFile is a file of the cgroup at path: in the controller's
// hierarchy on v1, in the unified one on v2.
func (e *env) cgroupFile(path, controller, file string) string {
	if e.v2 {
		return filepath.Join("/sys/fs/cgroup", path, file)
	}
	return filepath.Join("/sys/fs/cgroup", controller, path, file)
}

func containsLine(s, line string) bool {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// gone waits for berth-<id>.scope to be unknown to systemd: neither
// running nor failed.
func (e *env) gone(id string) {
	e.t.Helper()
	unit := "berth-" + id + ".scope"
	deadline := time.Now().Add(10 * time.Second)
	for {
		units, err := e.sd.ListUnitsByNamesContext(framework.Ctx(e.t), []string{unit})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(units) == 0 || units[0].LoadState == "not-found" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("unit %s still %s/%s", unit, units[0].LoadState, units[0].ActiveState)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkNoUnits fails the test if systemd still knows a unit of one of
// the test's pods or containers, failed ones included.
func (e *env) checkNoUnits() {
	var patterns []string
	for _, id := range e.ids {
		patterns = append(patterns, "berth-"+id+".scope")
	}
	if len(patterns) == 0 {
		return
	}
	units, err := e.sd.ListUnitsByPatternsContext(context.Background(), nil, patterns)
	if err != nil {
		e.t.Errorf("list units: %v", err)
		return
	}
	for _, u := range units {
		e.t.Errorf("unit %s left behind: %s/%s", u.Name, u.LoadState, u.ActiveState)
	}
}

func (e *env) containerPid(id string) int {
	e.t.Helper()
	resp, err := e.d.Runtime.ContainerStatus(framework.Ctx(e.t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		e.t.Fatal(err)
	}
	return infoPid(e.t, resp.Info)
}

func (e *env) pausePid(id string) int {
	e.t.Helper()
	resp, err := e.d.Runtime.PodSandboxStatus(framework.Ctx(e.t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		e.t.Fatal(err)
	}
	return infoPid(e.t, resp.Info)
}

// checkPodProcess: pause's parent, the pod's own process, is of the kind
// the run asked for (framework.EnvPodProcess): the scope was started by
// the C pod process's spawn helper, or by the Go monitor's.
func (e *env) checkPodProcess(pod string) {
	e.t.Helper()
	want := framework.PodProcessBinary()
	mon := framework.MonitorOf(e.t, pod, e.pausePid(pod))
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", mon)); strings.TrimSpace(string(comm)) != want {
		e.t.Fatalf("pod %s's own process %d is %q, want %s", pod, mon, comm, want)
	}
}

func infoPid(t *testing.T, info map[string]string) int {
	t.Helper()
	var v struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil || v.Pid == 0 {
		t.Fatalf("verbose info %q: no pid (%v)", info["info"], err)
	}
	return v.Pid
}

func (e *env) removePod(id string) {
	e.t.Helper()
	ctx := framework.Ctx(e.t)
	if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		e.t.Fatal(err)
	}
}

// A pod and its containers as the kubelet runs them under the systemd
// driver: every one a scope systemd made in the pod's slice, stats read
// from there, resources set through the units, kept across a restart and
// a crash of berth, and gone, failed units included, once removed.
func TestPodAndContainerScopes(t *testing.T) {
	e := newEnv(t)
	ctx := framework.Ctx(t)
	pod, podCfg := e.runPod("scopes", e.slice)
	e.scope(pod, e.slice, e.pausePid(pod))
	e.checkPodProcess(pod)

	ctr := e.runContainer(pod, podCfg, "sleeper", "exec sleep 1000")
	ctrCg := e.scope(ctr, e.slice, e.containerPid(ctr))

	// Stats come from the scope's cgroup.
	st, err := e.d.Runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: ctr})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStats().GetMemory().GetWorkingSetBytes() == nil || st.GetStats().GetCpu().GetUsageCoreNanoSeconds() == nil {
		t.Errorf("container stats without memory or CPU: %v", st.GetStats())
	}
	ps, err := e.d.Runtime.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatal(err)
	}
	if ps.GetStats().GetLinux().GetMemory().GetWorkingSetBytes() == nil {
		t.Errorf("pod stats without memory: %v", ps.GetStats().GetLinux())
	}

	// UpdateContainerResources goes through the unit: systemd's property
	// and the cgroup file agree.
	const limit = 96 << 20
	if _, err := e.d.Runtime.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: ctr, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: limit, CpuShares: 512},
	}); err != nil {
		t.Fatal(err)
	}
	e.checkMemoryLimit("berth-"+ctr+".scope", "Scope", ctrCg, limit)

	// The pod's own cgroup (the slice) is set through its unit too.
	const podLimit = 200 << 20
	if _, err := e.d.Runtime.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: pod, Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: podLimit, CpuShares: 1024},
	}); err != nil {
		t.Fatal(err)
	}
	slicePath, _ := cgroup.Systemd.Parent(e.slice)
	e.checkMemoryLimit(e.slice, "Slice", slicePath.Path(), podLimit)

	// A container that exits on its own leaves no unit.
	quick := e.runContainer(pod, podCfg, "quick", "exit 3")
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := e.d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: quick})
		if err != nil {
			t.Fatal(err)
		}
		if s.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			if s.Status.ExitCode != 3 {
				t.Errorf("quick exited %d, want 3", s.Status.ExitCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("quick did not exit")
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.gone(quick)

	// berth restarted, then killed: the scopes are found again, and
	// still hold their processes.
	e.d.Restart()
	e.scope(ctr, e.slice, e.containerPid(ctr))
	e.d.Kill()
	e.d.Restart()
	e.scope(pod, e.slice, e.pausePid(pod))
	e.scope(ctr, e.slice, e.containerPid(ctr))
	if _, err := e.d.Runtime.UpdateContainerResources(framework.Ctx(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: ctr, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 2 * limit},
	}); err != nil {
		t.Fatal(err)
	}
	e.checkMemoryLimit("berth-"+ctr+".scope", "Scope", ctrCg, 2*limit)

	e.removePod(pod)
	for _, id := range []string{pod, ctr, quick} {
		e.gone(id)
	}
	for _, dir := range []string{e.cgroupFile(ctrCg, "memory", ""), e.cgroupFile(ctrCg, "freezer", "")} {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("cgroup %s left behind", dir)
		}
	}
}

// checkMemoryLimit compares systemd's view of unit's memory limit and the
// cgroup's file with want.
func (e *env) checkMemoryLimit(unit, typ, path string, want uint64) {
	e.t.Helper()
	prop, file := "MemoryLimit", "memory.limit_in_bytes"
	if e.v2 {
		prop, file = "MemoryMax", "memory.max"
	}
	p, err := e.sd.GetUnitTypePropertyContext(framework.Ctx(e.t), unit, typ, prop)
	if err != nil || p.Value.Value() != want {
		e.t.Errorf("unit %s %s = %v (%v), want %d", unit, prop, p, err, want)
	}
	raw, err := os.ReadFile(e.cgroupFile(path, "memory", file))
	if err != nil || strings.TrimSpace(string(raw)) != strconv.FormatUint(want, 10) {
		e.t.Errorf("%s of %s = %q (%v), want %d", file, path, raw, err, want)
	}
}

// A pod that names no parent (crictl's) goes to berth.slice, which
// systemd makes for it.
func TestDefaultSlice(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.runPod("noparent", "")
	e.scope(pod, "berth.slice", e.pausePid(pod))
	ctr := e.runContainer(pod, podCfg, "sleeper", "exec sleep 1000")
	e.scope(ctr, "berth.slice", e.containerPid(ctr))
	e.removePod(pod)
	e.gone(pod)
	e.gone(ctr)
}

// A monitor that dies takes its containers down; their removal stops
// and resets what is left of their scopes (libcontainer's state is all
// berth has of them then).
func TestMonitorDeathLeavesNoUnits(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.runPod("orphans", e.slice)
	ctr := e.runContainer(pod, podCfg, "sleeper", "exec sleep 1000")
	e.scope(ctr, e.slice, e.containerPid(ctr))
	mon := framework.MonitorOf(t, pod, e.pausePid(pod))
	if err := syscall.Kill(mon, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := e.d.Runtime.ContainerStatus(framework.Ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
		if err != nil {
			t.Fatal(err)
		}
		if s.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(fmt.Sprintf("container still %s after its monitor died", s.Status.State))
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.removePod(pod)
	e.gone(pod)
	e.gone(ctr)
}
