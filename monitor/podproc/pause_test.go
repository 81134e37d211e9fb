package podproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	pauseOnce sync.Once
	pausePath string
	pauseErr  error
)

// buildPause builds berth-pause (C run before the Go runtime, with cgo)
// as hack/build does, once per test binary.
func buildPause(t *testing.T) string {
	t.Helper()
	pauseOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", buildDir+"/", "github.com/berth-runtime/berth/cmd/berth-pause")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			pauseErr = errors.New(string(out))
			return
		}
		pausePath = filepath.Join(buildDir, "berth-pause")
	})
	if pauseErr != nil {
		t.Fatalf("build berth-pause: %v", pauseErr)
	}
	return pausePath
}

// testCgroups makes a cgroup named name in each of the hierarchies
// (cgroup v1; the unified one on v2) and removes them at the end.
func testCgroups(t *testing.T, name string, hierarchies ...string) []string {
	t.Helper()
	var dirs []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		hierarchies = []string{""}
	}
	for _, h := range hierarchies {
		d := filepath.Join("/sys/fs/cgroup", h, cgroupName, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Skipf("cgroup %s: %v", d, err)
		}
		dirs = append(dirs, d)
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			for i := 0; i < 50; i++ {
				if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			os.Remove(filepath.Dir(d))
		}
	})
	return dirs
}

// pinnedNetNS is a new network namespace pinned by a bind mount.
func pinnedNetNS(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unshare", "--net="+path, "true").CombinedOutput(); err != nil {
		t.Skipf("pin a network namespace: %v %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(path, syscall.MNT_DETACH) })
	return path
}

func nsIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// runPause runs berth-pause as RUN does for a pod: born in netns, cloned
// into new IPC, UTS and PID namespaces, in the pod's cgroups before it
// runs, reporting ready on its sync pipe.
func runPause(t *testing.T, p *pod, id, netns string, cgroups []string, args ...string) (int, error) {
	t.Helper()
	dir := filepath.Join(p.dir, id)
	os.MkdirAll(dir, 0o700)
	pid, sync, err := p.c.RunSynced(ctxT(t), &RunRequest{ID: id, Dir: dir, Args: append([]string{buildPause(t)}, args...),
		NetNS: netns, NewIPC: true, NewUTS: true, NewPID: true, Join: cgroups, Cgroup: cgroups[0], Sync: true})
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.pids = append(p.pids, pid)
	p.mu.Unlock()
	defer sync.Close()
	sync.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg, err := io.ReadAll(sync)
	if err != nil || string(msg) != "ok" {
		return pid, fmt.Errorf("pause's report: %q %v", msg, err)
	}
	return pid, nil
}

// TestPauseThroughRun: the built-in pause started by the pod process as
// berth's pods need it.
func TestPauseThroughRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, cgroups)")
	}
	p := startPod(t)
	ctx := ctxT(t)
	netns := pinnedNetNS(t)
	cgroups := testCgroups(t, "pod1", "memory", "pids", "cpu")
	pid, err := runPause(t, p, "pod1", netns, cgroups, "-h", "pod-host")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := nsIno(t, fmt.Sprintf("/proc/%d/ns/net", pid)), nsIno(t, netns); got != want {
		t.Fatalf("pause's netns %d, want the pinned %d", got, want)
	}
	for _, ns := range []string{"ipc", "uts", "pid"} {
		if nsIno(t, fmt.Sprintf("/proc/%d/ns/%s", pid, ns)) == nsIno(t, "/proc/self/ns/"+ns) {
			t.Fatalf("pause shares the host's %s namespace", ns)
		}
	}
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-u", "hostname").Output(); err == nil && strings.TrimSpace(string(out)) != "pod-host" {
		t.Fatalf("pause's hostname %q", out)
	}
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, d := range cgroups {
		rel := "/" + cgroupName + "/pod1"
		if !strings.Contains(string(data), rel+"\n") {
			t.Fatalf("pause not in %s:\n%s", d, data)
		}
	}
	// Stopped as berth stops a pod: SIGTERM, and pause exits 0.
	if err := p.c.Signal(ctx, "pod1", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, err := p.c.Wait(ctx, "pod1"); err != nil || st.Exit.Code != 0 {
		t.Fatalf("pause's exit: %+v %v", st, err)
	}
	p.c.Delete(ctx, "pod1")

	// A cgroup it cannot join: nothing runs, the message says why.
	_, err = runPause(t, p, "pod2", netns, []string{"/sys/fs/cgroup/nonexistent"})
	if !IsCode(err, CodeFailed) || !strings.Contains(err.Error(), "join cgroup /sys/fs/cgroup/nonexistent") {
		t.Fatalf("run into a missing cgroup: %v", err)
	}
	if kids := children(t, p.proc.Pid); len(kids) != 0 {
		t.Fatalf("processes left: %v", kids)
	}
	shutdown(t, p)
}

// TestPauseMemory measures what pause adds to a pod: the memory cgroup
// charge (anonymous plus kernel memory, as hack/monitor-memcg) of a pod
// process alone (the pauseless layout) and of one with pause beside it,
// and both processes' PSS.
func TestPauseMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups)")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.kmem.usage_in_bytes"); err != nil {
		t.Skip("measured on cgroup v1 here (memory.kmem.usage_in_bytes)")
	}
	// The first pod loads both binaries into the page cache, charged to
	// its cgroup: it is not counted. All run at once, so that PSS shares
	// the binaries' text as it does on a node.
	const n = 8
	netns := pinnedNetNS(t)
	var alone, withPause, podPss, pausePss int
	var pods []*pod
	var pauses []int
	for i := range n + 1 {
		mem := testCgroups(t, fmt.Sprint("mem", i), "memory")[0]
		p := startPodIn(t, mem)
		time.Sleep(20 * time.Millisecond)
		a := anonKmem(t, mem)
		pid, err := runPause(t, p, "pod", netns, []string{mem})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		b := anonKmem(t, mem)
		if i > 0 {
			alone += a
			withPause += b
		}
		pods, pauses = append(pods, p), append(pauses, pid)
	}
	for i := 1; i <= n; i++ {
		podPss += pss(t, pods[i].proc.Pid)
		pausePss += pss(t, pauses[i])
	}
	t.Logf("memory cgroup per pod: pod process alone %d kB, with pause %d kB (pause adds %d kB); PSS with %d pods: pod process %d kB, pause %d kB",
		alone/n>>10, withPause/n>>10, (withPause-alone)/n>>10, n+1, podPss/n, pausePss/n)
	for _, p := range pods {
		p.c.Signal(ctxT(t), "pod", syscall.SIGKILL)
		p.c.Wait(ctxT(t), "pod")
		p.c.Delete(ctxT(t), "pod")
		shutdown(t, p)
	}
}

// anonKmem is a memory cgroup's kernel memory and its processes'
// anonymous memory, in bytes. Not memory.usage_in_bytes: that counter is
// charged ahead, 64 pages per CPU at a time, more than a pod process
// holds; nor total_rss, whose statistics are flushed every 2 s.
func anonKmem(t *testing.T, cg string) int {
	t.Helper()
	n := readInt(t, filepath.Join(cg, "memory.kmem.usage_in_bytes"))
	procs, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range strings.Fields(string(procs)) {
		data, _ := os.ReadFile("/proc/" + pid + "/smaps_rollup")
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "Anonymous:" {
				kb, _ := strconv.Atoi(f[1])
				n += kb << 10
			}
		}
	}
	return n
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return v
}

func pss(t *testing.T, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Skip("no smaps_rollup:", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	return 0
}

// startPodIn starts a pod process inside a memory cgroup: a shell joins
// it and execs the pod process, so that all the process's own memory is
// charged there.
func startPodIn(t *testing.T, memcg string) *pod {
	t.Helper()
	bin := build(t, BinaryName)
	wrapper := filepath.Join(t.TempDir(), "in-cgroup")
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s/cgroup.procs && exec %s \"$@\"\n", memcg, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &pod{t: t, sock: filepath.Join(dir, "pp.sock"), dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if p.proc, err = Start(ctx, StartOptions{Binary: wrapper, PodID: "mem", Socket: p.sock}); err != nil {
		t.Fatal(err)
	}
	p.c = &Client{Socket: p.sock}
	t.Cleanup(func() {
		p.proc.Kill()
		p.proc.Wait()
	})
	return p
}

// TestPauseInUserNamespace: pause cloned into a user namespace of its own
// (and a network namespace it owns), root there, mapped to the host ids
// berth gives.
func TestPauseInUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (user namespaces)")
	}
	p := startPod(t)
	ctx := ctxT(t)
	dir := filepath.Join(p.dir, "pod1")
	os.MkdirAll(dir, 0o700)
	pid, sync, err := p.c.RunSynced(ctx, &RunRequest{ID: "pod1", Dir: dir, Args: []string{buildPause(t), "-h", "userns-host"},
		NewIPC: true, NewUTS: true, NewPID: true, UIDMap: "0 1000000 65536\n", GIDMap: "0 1000000 65536\n", Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.pids = append(p.pids, pid)
	p.mu.Unlock()
	sync.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg, err := io.ReadAll(sync)
	sync.Close()
	if err != nil || string(msg) != "ok" {
		t.Fatalf("pause's report: %q %v", msg, err)
	}
	m, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if f := strings.Fields(string(m)); len(f) != 3 || f[0] != "0" || f[1] != "1000000" || f[2] != "65536" {
		t.Fatalf("uid_map %q", m)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	// RUN made it root of its user namespace (host 1000000); pause, once
	// set up, makes itself 65535 there, which only that root may do.
	if !strings.Contains(string(status), "\nUid:\t1065535\t1065535\t1065535\t1065535\n") {
		t.Fatalf("pause's ids on the host:\n%s", status)
	}
	for _, ns := range []string{"user", "net", "pid"} {
		if nsIno(t, fmt.Sprintf("/proc/%d/ns/%s", pid, ns)) == nsIno(t, "/proc/self/ns/"+ns) {
			t.Fatalf("pause shares the host's %s namespace", ns)
		}
	}
	if err := p.c.Signal(ctx, "pod1", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, err := p.c.Wait(ctx, "pod1"); err != nil || st.Exit.Code != 0 {
		t.Fatalf("exit: %+v %v", st, err)
	}
	p.c.Delete(ctx, "pod1")
	// Maps the kernel refuses: nothing runs, the error says which.
	_, err = p.c.Run(ctx, &RunRequest{ID: "bad", Dir: dir, Args: []string{buildPause(t)}, UIDMap: "0 0 1\n0 1 1\n", GIDMap: "0 1000000 1\n"})
	if !IsCode(err, CodeFailed) || !strings.Contains(err.Error(), "uid_map") {
		t.Fatalf("run with overlapping maps: %v", err)
	}
	if _, err := p.c.Run(ctx, &RunRequest{ID: "bad", Dir: dir, Args: []string{buildPause(t)}, UIDMap: "0 1000000 1\n"}); !IsCode(err, CodeInvalid) {
		t.Fatalf("run with a uid map alone: %v", err)
	}
	if kids := children(t, p.proc.Pid); len(kids) != 0 {
		t.Fatalf("processes left: %v", kids)
	}
	shutdown(t, p)
}
