package podproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/monitor"
	spawnpkg "github.com/berth-runtime/berth/monitor/spawn"
)

// The tests here run real containers: the pod process runs berth-spawn,
// which creates them with libcontainer in the busybox test image.

// cgroupName holds the test containers' cgroups.
const cgroupName = "berth-podproc-test"

var testParent, _ = cgroup.Cgroupfs.Parent("/" + cgroupName)

var (
	spawnOnce sync.Once
	spawnPath string
	spawnErr  error
)

// buildSpawn builds berth-spawn as berth ships it, once per test binary.
func buildSpawn(t *testing.T) string {
	t.Helper()
	spawnOnce.Do(func() {
		cmd := exec.Command("go", "build", "-tags", "seccomp", "-o", buildDir+"/", "github.com/berth-runtime/berth/cmd/berth-spawn")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			spawnErr = errors.New(string(out))
			return
		}
		spawnPath = filepath.Join(buildDir, monitor.SpawnBinary)
	})
	if spawnErr != nil {
		t.Fatalf("build berth-spawn: %v", spawnErr)
	}
	return spawnPath
}

var (
	rootfsOnce sync.Once
	rootfsDir  string
	rootfsSkip string
)

// busyboxRootfs unpacks the busybox test image hack/build-images caches
// (once per test binary, under buildDir), or skips.
func busyboxRootfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, cgroups)")
	}
	rootfsOnce.Do(func() {
		cache := os.Getenv("BERTH_CACHE")
		if cache == "" {
			cache = "/var/cache/berth-dev"
		}
		data, err := os.ReadFile(filepath.Join(cache, "images", "current.json"))
		if err != nil {
			rootfsSkip = "needs the busybox test image (run hack/build-images): " + err.Error()
			return
		}
		var images []struct{ Name, Layout, Digest string }
		if err := json.Unmarshal(data, &images); err != nil {
			rootfsSkip = err.Error()
			return
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
			if err == nil {
				err = json.Unmarshal(b, &m)
			}
			if err != nil {
				rootfsSkip = err.Error()
				return
			}
			root := filepath.Join(buildDir, "rootfs")
			os.MkdirAll(root, 0o755)
			for _, l := range m.Layers {
				if out, err := exec.Command("tar", "-xzf", blob(l.Digest), "-C", root).CombinedOutput(); err != nil {
					rootfsSkip = "unpack: " + string(out)
					return
				}
			}
			rootfsDir = root
			return
		}
		rootfsSkip = "no busybox image in the cache"
	})
	if rootfsSkip != "" {
		t.Skip(rootfsSkip)
	}
	return rootfsDir
}

// ctrPod is a pod process that makes containers.
type ctrPod struct {
	*pod
	root   string // libcontainer's state root
	rootfs string
}

func startCtrPod(t *testing.T, env ...string) *ctrPod {
	t.Helper()
	rootfs := busyboxRootfs(t)
	spawn := buildSpawn(t)
	bin := build(t, BinaryName)
	dir := t.TempDir()
	p := &pod{t: t, sock: filepath.Join(dir, "pp.sock"), dir: dir}
	logf, err := os.Create(filepath.Join(dir, "podproc.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	root := filepath.Join(dir, "runc")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.proc, err = Start(ctx, StartOptions{Binary: bin, PodID: "pod-" + t.Name(), Socket: p.sock, Log: logf, Spawn: spawn, Root: root, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	p.c = &Client{Socket: p.sock}
	cp := &ctrPod{pod: p, root: root, rootfs: rootfs}
	t.Cleanup(func() {
		// Every container killed, waited for and destroyed (by the pod
		// process), then the pod process ended.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ids, _ := os.ReadDir(filepath.Join(dir, "containers"))
		for _, id := range ids {
			p.c.Signal(ctx, id.Name(), syscall.SIGKILL)
			p.c.Wait(ctx, id.Name())
			p.c.Delete(ctx, id.Name())
		}
		if err := p.c.Shutdown(ctx); err != nil && !errors.Is(err, monitor.ErrUnreachable) {
			t.Errorf("shutdown: %v", err)
		}
		p.proc.Wait()
		if t.Failed() || os.Getenv("PODPROC_SHOW_LOG") != "" {
			if data, err := os.ReadFile(filepath.Join(dir, "podproc.log")); err == nil {
				t.Logf("podproc's log:\n%s", data)
			}
		}
		if left, _ := os.ReadDir(root); len(left) > 0 {
			t.Errorf("libcontainer state left: %v", left)
		}
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupName)
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup left: %v", err)
			}
		}
	})
	return cp
}

// spec writes the spec of a container of a host-network pod (no pause to
// join) and returns its dir.
func (p *ctrPod) spec(id string, cfg *runtimeapi.ContainerConfig) string {
	p.t.Helper()
	host := runtimeapi.NamespaceMode_NODE
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: host, Ipc: host, Pid: runtimeapi.NamespaceMode_CONTAINER}
	s, err := spec.Build(&spec.Input{
		ID: id, Config: cfg, Rootfs: p.rootfs,
		Pod:  spec.Pod{ID: "pod1", Config: &runtimeapi.PodSandboxConfig{}, CgroupParent: testParent},
		Host: spec.SystemHost{}, Files: spec.DirFS(p.rootfs),
	})
	if err != nil {
		p.t.Fatal(err)
	}
	dir := filepath.Join(p.dir, "containers", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		p.t.Fatal(err)
	}
	data, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(dir, monitor.SpecFile), data, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return dir
}

// create makes a container and returns its dir and log.
func (p *ctrPod) create(id string, cfg *runtimeapi.ContainerConfig) (dir, logPath string) {
	p.t.Helper()
	dir = p.spec(id, cfg)
	logPath = filepath.Join(dir, "log")
	if _, err := p.c.Create(ctxT(p.t), &CreateRequest{ID: id, Dir: dir, LogPath: logPath, Stdin: cfg.Stdin, StdinOnce: cfg.StdinOnce, TTY: cfg.Tty}); err != nil {
		p.t.Fatalf("create %s: %v", id, err)
	}
	return dir, logPath
}

func (p *ctrPod) running(id string, cfg *runtimeapi.ContainerConfig) (dir, logPath string) {
	p.t.Helper()
	dir, logPath = p.create(id, cfg)
	if err := p.c.Start(ctxT(p.t), id); err != nil {
		p.t.Fatalf("start %s: %v", id, err)
	}
	return dir, logPath
}

func alive(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// A zombie is not alive.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// ppid is a process's parent, 0 if it is gone.
func ppid(pid int) int {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestContainerLifecycle: create, start, log, exec (sync, with stdin),
// update, signal, the exit recorded and what libcontainer kept removed.
func TestContainerLifecycle(t *testing.T) {
	p := startCtrPod(t)
	ctx := ctxT(t)
	dir, logPath := p.create("c1", &runtimeapi.ContainerConfig{Command: []string{"sh", "-c", "trap 'exit 3' TERM; echo out; echo err >&2; while true; do sleep 0.1; done"}})
	st, err := p.c.Status(ctx, "c1")
	if err != nil || st.State != StateCreated || st.Pid <= 0 || !alive(st.Pid) {
		t.Fatalf("status after create: %+v %v", st, err)
	}
	// Answered once the helper is gone: the init is the pod process's.
	if pp := ppid(st.Pid); pp != p.proc.Pid {
		t.Fatalf("the init's parent is %d, not the pod process %d", pp, p.proc.Pid)
	}
	if _, err := p.c.Exec(ctx, &ExecRequest{ID: "c1", Args: []string{"true"}}); !IsCode(err, CodeNotRunning) {
		t.Fatalf("exec before start: %v", err)
	}
	if _, err := p.c.Create(ctx, &CreateRequest{ID: "c1", Dir: dir}); !IsCode(err, CodeExists) {
		t.Fatalf("create with an id in use: %v", err)
	}
	if err := p.c.Start(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := p.c.Start(ctx, "c1"); err == nil {
		t.Fatal("a second start succeeded")
	}
	if st, err := p.c.Status(ctx, "c1"); err != nil || st.State != StateRunning {
		t.Fatalf("status after start: %+v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(p.root, "c1", "exec.fifo")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("exec fifo after start: %v", err)
	}

	res, err := p.c.ExecSync(ctx, "c1", []string{"sh", "-c", "echo hi; echo oops >&2; id -u; exit 7"}, 0, 0)
	if err != nil || res.Code != 7 || string(res.Stdout) != "hi\n0\n" || string(res.Stderr) != "oops\n" || res.TimedOut {
		t.Fatalf("exec: %+v %v", res, err)
	}
	res, err = p.c.ExecSync(ctx, "c1", []string{"sh", "-c", "head -c 100000 /dev/zero"}, 0, 1000)
	if err != nil || len(res.Stdout) != 1000 || res.Code != 0 {
		t.Fatalf("capped exec: %d bytes, %+v %v", len(res.Stdout), res.Code, err)
	}
	t0 := time.Now()
	res, err = p.c.ExecSync(ctx, "c1", []string{"sleep", "30"}, 300*time.Millisecond, 0)
	if err != nil || !res.TimedOut || time.Since(t0) > 5*time.Second {
		t.Fatalf("exec past its timeout: %+v %v after %s", res, err, time.Since(t0))
	}
	if _, err := p.c.ExecSync(ctx, "c1", []string{"/no/such/program"}, 0, 0); err == nil {
		// libcontainer reports a missing program as the exec's failure.
		t.Fatal("exec of a missing program succeeded")
	}

	s, err := p.c.Exec(ctx, &ExecRequest{ID: "c1", Args: []string{"sh", "-c", "read x; echo out:$x; echo err:$x >&2; exit 3"}, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Stdin.WriteString("hello\n")
	s.Stdin.Close()
	out := readCapped(s.Stdout, 1<<20)
	errOut := readCapped(s.Stderr, 1<<20)
	if exit, err := s.Wait(ctx); err != nil || exit.Code != 3 || string(out) != "out:hello\n" || string(errOut) != "err:hello\n" {
		t.Fatalf("exec with stdin: %+v %v, stdout %q stderr %q", exit, err, out, errOut)
	}
	s.Close()

	// Update: the memory limit lands in the container's cgroup.
	limit := int64(64 << 20)
	blob, _ := json.Marshal(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}})
	if err := p.c.Update(ctx, "c1", blob); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", cgroupName, "c1", "memory.limit_in_bytes")); err == nil && strings.TrimSpace(string(got)) != "67108864" {
		t.Fatalf("memory limit after update: %s", got)
	}
	if err := p.c.Update(ctx, "c1", []byte("{not json")); !IsCode(err, CodeFailed) {
		t.Fatalf("update with bad resources: %v", err)
	}

	if err := p.c.Signal(ctx, "c1", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w, err := p.c.Wait(ctx, "c1")
	if err != nil || w.Exit.Code != 3 || w.Exit.Signal != 0 || w.Exit.OOMKilled {
		t.Fatalf("exit: %+v %v", w, err)
	}
	if rec, err := monitor.ReadExit(dir); err != nil || rec == nil || rec.Code != 3 {
		t.Fatalf("exit file: %+v %v", rec, err)
	}
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), " stdout F out\n") || !strings.Contains(string(log), " stderr F err\n") {
		t.Fatalf("log:\n%s", log)
	}
	// Once the exit is recorded, nothing of libcontainer's is left.
	if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupName + "/c1"); len(dirs) > 0 {
		t.Errorf("cgroups left after the exit: %v", dirs)
	}
	if _, err := os.Stat(filepath.Join(p.root, "c1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("libcontainer state left after the exit: %v", err)
	}
	if err := p.c.Start(ctx, "c1"); !IsCode(err, CodeNotRunning) {
		t.Fatalf("start after the exit: %v", err)
	}
	if _, err := p.c.Exec(ctx, &ExecRequest{ID: "c1", Args: []string{"true"}}); !IsCode(err, CodeNotRunning) {
		t.Fatalf("exec after the exit: %v", err)
	}
	if err := p.c.Delete(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
}

// TestContainerExitAndOOM: exit codes and the OOM killer's verdict, read
// from the container's memory cgroup.
func TestContainerExitAndOOM(t *testing.T) {
	p := startCtrPod(t)
	ctx := ctxT(t)
	p.running("ok", &runtimeapi.ContainerConfig{Command: []string{"sh", "-c", "exit 5"}})
	if w, err := p.c.Wait(ctx, "ok"); err != nil || w.Exit.Code != 5 || w.Exit.OOMKilled {
		t.Fatalf("exit: %+v %v", w, err)
	}
	p.running("oom", &runtimeapi.ContainerConfig{
		Command: []string{"sh", "-c", "x=a; while true; do x=$x$x; done"},
		Linux:   &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 16 << 20}},
	})
	if w, err := p.c.Wait(ctx, "oom"); err != nil || !w.Exit.OOMKilled || w.Exit.Code != 137 {
		t.Fatalf("exit: %+v %v", w, err)
	}
}

// TestContainerCreateFailure: a create that fails leaves nothing (no
// state dir, no cgroup) and the id free for the next.
func TestContainerCreateFailure(t *testing.T) {
	p := startCtrPod(t)
	ctx := ctxT(t)
	dir := p.spec("bad", &runtimeapi.ContainerConfig{Command: []string{"sh"}})
	// A rootfs that does not exist.
	var s map[string]any
	data, _ := os.ReadFile(filepath.Join(dir, monitor.SpecFile))
	json.Unmarshal(data, &s)
	s["root"] = map[string]any{"path": "/nonexistent-rootfs"}
	data, _ = json.Marshal(s)
	os.WriteFile(filepath.Join(dir, monitor.SpecFile), data, 0o600)
	_, err := p.c.Create(ctx, &CreateRequest{ID: "bad", Dir: dir})
	if !IsCode(err, CodeFailed) || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("create with a missing rootfs: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p.root, "bad")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state after a failed create: %v", err)
	}
	if _, err := p.c.Status(ctx, "bad"); !IsCode(err, CodeNotFound) {
		t.Fatalf("status after a failed create: %v", err)
	}
	p.running("bad", &runtimeapi.ContainerConfig{Command: []string{"true"}})
	if w, err := p.c.Wait(ctx, "bad"); err != nil || w.Exit.Code != 0 {
		t.Fatalf("the id again: %+v %v", w, err)
	}
}

// TestContainerRestoreFailure: a CREATE with the restore flag runs
// berth-spawn's restore; one that fails (here: no checkpoint in the dir)
// is answered with the helper's error and leaves nothing, the id free. A
// restore with a terminal is refused before anything runs.
func TestContainerRestoreFailure(t *testing.T) {
	p := startCtrPod(t)
	ctx := ctxT(t)
	dir := p.spec("rst", &runtimeapi.ContainerConfig{Command: []string{"sh"}})
	if _, err := p.c.Create(ctx, &CreateRequest{ID: "rst", Dir: dir, Restore: true, TTY: true}); !IsCode(err, CodeInvalid) || !strings.Contains(err.Error(), "terminal") {
		t.Fatalf("restore with a terminal: %v", err)
	}
	_, err := p.c.Create(ctx, &CreateRequest{ID: "rst", Dir: dir, Restore: true})
	if !IsCode(err, CodeFailed) || !strings.Contains(err.Error(), "rst: restore") {
		t.Fatalf("restore without a checkpoint: %v", err)
	}
	t.Logf("restore without a checkpoint: %v", err)
	if _, err := os.Stat(filepath.Join(p.root, "rst")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state after a failed restore: %v", err)
	}
	if _, err := p.c.Status(ctx, "rst"); !IsCode(err, CodeNotFound) {
		t.Fatalf("status after a failed restore: %v", err)
	}
	p.running("rst", &runtimeapi.ContainerConfig{Command: []string{"true"}})
	if w, err := p.c.Wait(ctx, "rst"); err != nil || w.Exit.Code != 0 {
		t.Fatalf("the id again: %+v %v", w, err)
	}
}

// TestContainerTTYAndAttach: a container with a terminal, attached to:
// input through the terminal, output from it, a resize, stdin-once
// hanging it up.
func TestContainerTTYAndAttach(t *testing.T) {
	p := startCtrPod(t)
	ctx := ctxT(t)
	p.running("tty", &runtimeapi.ContainerConfig{Command: []string{"sh"}, Tty: true, Stdin: true, StdinOnce: true})
	a, err := p.c.Attach(ctx, &AttachRequest{ID: "tty", Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Resize(123, 45); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	a.Write([]byte("stty size; tty; echo done-$((40+2))\n"))
	var out strings.Builder
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "done-42") && time.Now().Before(deadline) {
		typ, data, exit, err := a.Read()
		if err != nil || typ == FrameExit {
			t.Fatalf("attach: %v %+v, output so far %q", err, exit, out.String())
		}
		out.Write(data)
	}
	if !strings.Contains(out.String(), "45 123") || !strings.Contains(out.String(), "/dev/pts/") {
		t.Fatalf("terminal output: %q", out.String())
	}
	// stdin-once: the terminal is hung up, and the shell ends.
	a.CloseStdin()
	for {
		typ, _, exit, err := a.Read()
		if err != nil {
			t.Fatalf("attach after the hangup: %v", err)
		}
		if typ == FrameExit {
			if exit.Code != 129 && exit.Code != 0 {
				t.Fatalf("exit after the hangup: %+v", exit)
			}
			break
		}
	}
}

// TestExecTTYAndHangup: an exec with a terminal (its master sent to
// berth), and an exec killed when berth hangs up.
func TestExecTTYAndHangup(t *testing.T) {
	p := startCtrPod(t)
	ctx := ctxT(t)
	p.running("c1", &runtimeapi.ContainerConfig{Command: []string{"sleep", "1000"}})
	s, err := p.c.Exec(ctx, &ExecRequest{ID: "c1", Args: []string{"sh", "-c", "stty size; read x; echo got:$x; exit 6"}, TTY: true, Width: 100, Height: 40})
	if err != nil {
		t.Fatal(err)
	}
	s.Console.WriteString("abc\n")
	var out []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(out), "got:abc") {
		n, err := s.Console.Read(buf)
		if err != nil {
			t.Fatalf("terminal: %v, read %q", err, out)
		}
		out = append(out, buf[:n]...)
	}
	if !strings.Contains(string(out), "40 100") {
		t.Fatalf("terminal size: %q", out)
	}
	if exit, err := s.Wait(ctx); err != nil || exit.Code != 6 {
		t.Fatalf("exit: %+v %v", exit, err)
	}
	s.Close()

	s, err = p.c.Exec(ctx, &ExecRequest{ID: "c1", Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if !alive(s.Pid) || ppid(s.Pid) != p.proc.Pid {
		t.Fatalf("exec %d not running as the pod process's child (parent %d)", s.Pid, ppid(s.Pid))
	}
	s.Close()
	waitFor(t, func() bool { return !alive(s.Pid) })

	// Fifty execs, one after the other, and the pod process holds none.
	// Half exit at once: often before their helper does, so the pod
	// process reaps them before their record is made.
	for i := range 50 {
		args, want := []string{"echo", strconv.Itoa(i)}, strconv.Itoa(i)+"\n"
		if i%2 == 1 {
			args, want = []string{"true"}, ""
		}
		res, err := p.c.ExecSync(ctx, "c1", args, 10*time.Second, 0)
		if err != nil || string(res.Stdout) != want || res.TimedOut {
			t.Fatalf("exec %d: %+v %v", i, res, err)
		}
	}
	if n := countFDs(t, p.proc.Pid); n > 20 {
		t.Fatalf("the pod process holds %d descriptors after the execs", n)
	}
}

// children are the pids of a process's children.
func children(t *testing.T, pid int) []int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	return pids
}

// TestSpawnHelperKilled: the spawn helper SIGKILLed at each of its crash
// points. Before it answered, the create fails and leaves nothing (its
// state and any process it started destroyed, the id free); after, the
// container is the pod process's and runs.
func TestSpawnHelperKilled(t *testing.T) {
	for _, point := range []string{spawnpkg.PointCreated, spawnpkg.PointStarted, spawnpkg.PointReported} {
		t.Run(point, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "reached")
			p := startCtrPod(t, faultpoint.Env(point, marker, 0)...)
			ctx := ctxT(t)
			dir := p.spec("c1", &runtimeapi.ContainerConfig{Command: []string{"sh", "-c", "exit 9"}})
			created := make(chan error, 1)
			go func() {
				_, err := p.c.Create(ctx, &CreateRequest{ID: "c1", Dir: dir, LogPath: filepath.Join(dir, "log")})
				created <- err
			}()
			waitFor(t, func() bool { _, err := os.Stat(marker); return err == nil })
			var helper int
			for _, pid := range children(t, p.proc.Pid) {
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == monitor.SpawnBinary {
					helper = pid
				}
			}
			if helper == 0 {
				t.Fatal("no helper among the pod process's children")
			}
			syscall.Kill(helper, syscall.SIGKILL)
			err := <-created
			if point == spawnpkg.PointReported {
				if err != nil {
					t.Fatalf("create answered before the helper died: %v", err)
				}
				if err := p.c.Start(ctx, "c1"); err != nil {
					t.Fatal(err)
				}
				if w, err := p.c.Wait(ctx, "c1"); err != nil || w.Exit.Code != 9 {
					t.Fatalf("exit: %+v %v", w, err)
				}
				return
			}
			if !IsCode(err, CodeFailed) || !strings.Contains(err.Error(), "without an answer") {
				t.Fatalf("create with its helper killed: %v", err)
			}
			if _, err := os.Stat(filepath.Join(p.root, "c1")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("state left: %v", err)
			}
			if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupName + "/c1"); len(dirs) > 0 {
				t.Fatalf("cgroups left: %v", dirs)
			}
			// Nothing but what this test runs is left below the pod process.
			waitFor(t, func() bool { return len(children(t, p.proc.Pid)) == 0 })
			if _, err := p.c.Status(ctx, "c1"); !IsCode(err, CodeNotFound) {
				t.Fatalf("status: %v", err)
			}
		})
	}
}

// TestStatusWaitsForCreate: a status call while a create is under way
// answers once it is done, so that berth, undoing a create it gave up on,
// finds the container to kill.
func TestStatusWaitsForCreate(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "reached")
	p := startCtrPod(t, faultpoint.Env(spawnpkg.PointCreated, marker, 700*time.Millisecond)...)
	ctx := ctxT(t)
	dir := p.spec("c1", &runtimeapi.ContainerConfig{Command: []string{"sleep", "100"}})
	created := make(chan error, 1)
	go func() {
		_, err := p.c.Create(ctx, &CreateRequest{ID: "c1", Dir: dir})
		created <- err
	}()
	waitFor(t, func() bool { _, err := os.Stat(marker); return err == nil })
	if err := p.c.Signal(ctx, "c1", syscall.SIGKILL); !IsCode(err, CodeNotFound) {
		t.Fatalf("signal while it is made: %v", err)
	}
	st, err := p.c.Status(ctx, "c1")
	if err != nil || st.State != StateCreated || !alive(st.Pid) {
		t.Fatalf("status while it is made: %+v %v", st, err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
}
