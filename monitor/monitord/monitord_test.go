package monitord_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/monitor"
)

// testParent holds the test containers' cgroups.
var testParent, _ = cgroup.Cgroupfs.Parent("/berth-monitord-test")

// busyboxRootfs unpacks the busybox test image that hack/build-images
// caches, or skips.
func busyboxRootfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, cgroups)")
	}
	cache := os.Getenv("BERTH_CACHE")
	if cache == "" {
		cache = "/var/cache/berth-dev"
	}
	data, err := os.ReadFile(filepath.Join(cache, "images", "current.json"))
	if err != nil {
		t.Skipf("needs the busybox test image (run hack/build-images): %v", err)
	}
	var images []struct{ Name, Layout, Digest string }
	if err := json.Unmarshal(data, &images); err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		if img.Name != "busybox" {
			continue
		}
		blob := func(d string) string {
			return filepath.Join(img.Layout, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
		}
		var m struct{ Layers []struct{ Digest string } }
		b, err := os.ReadFile(blob(img.Digest))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		for _, l := range m.Layers {
			if out, err := exec.Command("tar", "-xzf", blob(l.Digest), "-C", root).CombinedOutput(); err != nil {
				t.Fatalf("unpack: %v %s", err, out)
			}
		}
		return root
	}
	t.Skip("no busybox image in the cache")
	return ""
}

// buildMonitor builds the monitor as berth ships it, without cgo, and the
// spawn helper next to it.
func buildMonitor(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []struct{ pkg, cgo string }{
		{"github.com/berth-runtime/berth/cmd/berth-monitor", "CGO_ENABLED=0"},
		{"github.com/berth-runtime/berth/cmd/berth-spawn", "CGO_ENABLED=1"},
	} {
		cmd := exec.Command("go", "build", "-tags", "seccomp", "-o", dir+"/", b.pkg)
		cmd.Env = append(os.Environ(), b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, monitor.BinaryName)
}

type env struct {
	t      *testing.T
	state  string
	rootfs string
	client *monitor.Client
}

func start(t *testing.T) *env {
	rootfs := busyboxRootfs(t)
	bin := buildMonitor(t)
	state, err := os.MkdirTemp("", "monitord-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	paths := monitor.PathsFor(state, "pod1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	proc, err := monitor.Start(ctx, monitor.StartOptions{Binary: bin, PodID: "pod1", Paths: paths, RuncRoot: filepath.Join(state, "runc")})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, state: state, rootfs: rootfs, client: &monitor.Client{Socket: paths.Socket}}
	t.Cleanup(func() {
		proc.Kill()
		proc.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(paths.Log)
			t.Logf("monitor log:\n%s", log)
		}
	})
	return e
}

// create builds a spec for a container of a host-network pod (no pause to
// join) and creates it.
func (e *env) create(id string, cfg *runtimeapi.ContainerConfig) string {
	e.t.Helper()
	host := runtimeapi.NamespaceMode_NODE
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: host, Ipc: host, Pid: runtimeapi.NamespaceMode_CONTAINER}
	s, err := spec.Build(&spec.Input{
		ID: id, Config: cfg, Rootfs: e.rootfs,
		Pod:  spec.Pod{ID: "pod1", Config: &runtimeapi.PodSandboxConfig{}, CgroupParent: testParent},
		Host: spec.SystemHost{}, Files: spec.DirFS(e.rootfs),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	dir := filepath.Join(e.state, "containers", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	data, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(dir, monitor.SpecFile), data, 0o600); err != nil {
		e.t.Fatal(err)
	}
	logPath := filepath.Join(dir, "log")
	e.call(&monitor.Request{Op: monitor.OpCreate, ID: id, Create: &monitor.CreateRequest{Dir: dir, LogPath: logPath, Stdin: cfg.Stdin, StdinOnce: cfg.StdinOnce}})
	e.t.Cleanup(func() {
		e.client.Call(context.Background(), &monitor.Request{Op: monitor.OpSignal, ID: id, Signal: 9})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.client.Call(ctx, &monitor.Request{Op: monitor.OpWait, ID: id})
		e.client.Call(ctx, &monitor.Request{Op: monitor.OpDelete, ID: id})
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/berth-monitord-test")
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	return logPath
}

func (e *env) call(req *monitor.Request) *monitor.Response {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := e.client.Call(ctx, req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Op, req.ID, err)
	}
	return resp
}

func TestLifecycle(t *testing.T) {
	e := start(t)
	logPath := e.create("c1", &runtimeapi.ContainerConfig{Command: []string{"sh", "-c", "trap 'exit 3' TERM; echo out; echo err >&2; while true; do sleep 0.1; done"}, Stdin: true})
	if st := e.call(&monitor.Request{Op: monitor.OpStatus, ID: "c1"}); st.State != monitor.StateCreated || st.Pid == 0 {
		t.Fatalf("status after create: %+v", st)
	}
	e.call(&monitor.Request{Op: monitor.OpStart, ID: "c1"})
	res := e.call(&monitor.Request{Op: monitor.OpExec, ID: "c1", Exec: &monitor.ExecRequest{Args: []string{"sh", "-c", "echo hi; exit 7"}}})
	if res.Exec.Code != 7 || string(res.Exec.Stdout) != "hi\n" {
		t.Fatalf("exec: %+v", res.Exec)
	}
	start := time.Now()
	res = e.call(&monitor.Request{Op: monitor.OpExec, ID: "c1", Exec: &monitor.ExecRequest{Args: []string{"sleep", "10"}, Timeout: 300 * time.Millisecond}})
	if !res.Exec.TimedOut || time.Since(start) > 5*time.Second {
		t.Fatalf("exec timeout: %+v after %s", res.Exec, time.Since(start))
	}
	e.call(&monitor.Request{Op: monitor.OpSignal, ID: "c1", Signal: 15})
	w := e.call(&monitor.Request{Op: monitor.OpWait, ID: "c1"})
	if w.Exit == nil || w.Exit.Code != 3 || w.Exit.Signal != 0 {
		t.Fatalf("exit %+v", w.Exit)
	}
	recorded, err := monitor.ReadExit(filepath.Join(e.state, "containers", "c1"))
	if err != nil || recorded == nil || recorded.Code != w.Exit.Code {
		t.Fatalf("exit file %+v %v", recorded, err)
	}
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), " stdout F out\n") || !strings.Contains(string(log), " stderr F err\n") {
		t.Fatalf("log:\n%s", log)
	}
	// Once its exit is recorded, nothing of libcontainer's is left of it:
	// its cgroups and its state dir are gone (the monitor removes them
	// itself for a container of its own PID namespace).
	if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/berth-monitord-test/c1"); len(dirs) > 0 {
		t.Errorf("cgroups left after the exit: %v", dirs)
	}
	if _, err := os.Stat(filepath.Join(e.state, "runc", "c1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("libcontainer state left after the exit: %v", err)
	}
}

func TestExitCodeAndOOM(t *testing.T) {
	e := start(t)
	e.create("ok", &runtimeapi.ContainerConfig{Command: []string{"sh", "-c", "exit 5"}})
	e.call(&monitor.Request{Op: monitor.OpStart, ID: "ok"})
	if w := e.call(&monitor.Request{Op: monitor.OpWait, ID: "ok"}); w.Exit.Code != 5 || w.Exit.OOMKilled {
		t.Fatalf("exit %+v", w.Exit)
	}
	e.create("oom", &runtimeapi.ContainerConfig{
		Command: []string{"sh", "-c", "x=a; while true; do x=$x$x; done"},
		Linux:   &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 16 << 20}},
	})
	e.call(&monitor.Request{Op: monitor.OpStart, ID: "oom"})
	if w := e.call(&monitor.Request{Op: monitor.OpWait, ID: "oom"}); !w.Exit.OOMKilled || w.Exit.Code != 137 {
		t.Fatalf("exit %+v", w.Exit)
	}
}
