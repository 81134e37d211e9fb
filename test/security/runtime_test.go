package security_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestRunc_CVE_2019_5736_RuntimeBinaryFromInside: a process in the
// container watches /proc for the runtime's init (which enters the
// container's PID namespace for a moment on every exec, and on every
// create in a pod that shares its PID namespace) and tries to open its
// binary and reopen it for writing, as the published exploit overwrote
// runc. libcontainer runs its init from a sealed clone and makes it
// non-dumpable; what berth must add is that its own binaries (berth,
// the spawn helper, the pod process) are never what runs there. The race
// is real but not forced: the test counts what the attacker saw and
// fails on anything it could open for writing, and on any change to
// berth's binaries.
func TestRunc_CVE_2019_5736_RuntimeBinaryFromInside(t *testing.T) {
	e := newEnv(t)
	bin := framework.Binary(t)
	binaries := []string{bin}
	for _, n := range []string{"berth-spawn", "berth-monitor", "berth-podproc", "berth-pause"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(bin), n)); err == nil {
			binaries = append(binaries, filepath.Join(filepath.Dir(bin), n))
		}
	}
	hashes := map[string]string{}
	var ids []string
	for _, b := range binaries {
		hashes[b] = fileHash(t, b)
		fi, err := os.Stat(b)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		ids = append(ids, fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	}
	img := e.push("attacker", image(t, e.busybox(), nil, layer(t, entry{name: "attacker", typ: '0', body: string(buildAttacker(t)), mode: 0o755})))
	e.mustPull(img)

	pod, podCfg := e.RunPodWith("cve-2019-5736", func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}}
	})
	attacker := e.mustStart(pod, podCfg, e.ctr("attacker", img, append([]string{"/attacker", "8s"}, ids...)...))
	// Execs into the attacker's container, and new containers in its PID
	// namespace, while it watches.
	deadline := time.Now().Add(6 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		e.exec(attacker, "true")
		if i%4 == 0 {
			c := e.ctr(fmt.Sprintf("bystander-%d", i), "", "sleep", "1")
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}}}
			e.mustStart(pod, podCfg, c)
		}
	}
	if st := e.WaitExit(attacker, 20*time.Second); st.ExitCode != 0 {
		t.Errorf("attacker exited %d: %s", st.ExitCode, st.Message)
	}
	log := readLog(t, filepath.Join(podCfg.LogDirectory, "attacker.log"))
	t.Logf("attacker: %s", strings.TrimSpace(log))
	if strings.Contains(log, "RUNTIME") || strings.Contains(log, "WRITABLE") {
		t.Errorf("the container opened a binary of the runtime:\n%s", log)
	}
	if !regexp.MustCompile(`fresh [1-9]`).MatchString(log) {
		t.Errorf("the attacker saw no process enter its PID namespace: the test proved nothing:\n%s", log)
	}
	for b, h := range hashes {
		if got := fileHash(t, b); got != h {
			t.Errorf("%s changed", b)
		}
	}
}

// readLog returns the text of a CRI log file without its prefixes.
func readLog(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			out.WriteString(f[3])
			if f[2] == "F" {
				out.WriteString("\n")
			}
		}
	}
	return out.String()
}

// TestRunc_CVE_2024_21626_LeakedDescriptors: runc leaked a descriptor of
// the host's /sys/fs/cgroup into the container's init, and a working
// directory of /proc/self/fd/N put the container's process in that host
// directory, outside its root: from there ../../.. is the host. berth's
// pod process, spawn helper and libcontainer sit between the kubelet
// and the container, each with descriptors of its own (sockets, log
// files, state dirs, the image store). Each working dir must be refused
// or land inside the container; no process in the container, its first
// or an exec'd one, may hold a descriptor beyond 0-2; and this holds for
// both pod processes.
func TestRunc_CVE_2024_21626_LeakedDescriptors(t *testing.T) {
	for _, kind := range []string{"monitor", "podproc"} {
		t.Run(kind, func(t *testing.T) {
			if kind == "podproc" {
				if _, err := os.Stat(filepath.Join(filepath.Dir(framework.Binary(t)), "berth-podproc")); err != nil {
					t.Skip("berth-podproc is not built next to berth")
				}
			}
			victim := newVictim(t)
			// berth's parent hands it a descriptor of a host directory
			// (a supervisor's or a shell's, not close-on-exec), the shape
			// of runc's leak: it must reach no process of the pod.
			leak, err := syscall.Open(victim.Dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, framework.WithArgs("--pod-process", kind))
			syscall.Close(leak)
			up := strings.Repeat("../", 20)
			pod, podCfg := e.RunPod("cve-2024-21626")

			var dirs []string
			for fd := 3; fd < 16; fd++ {
				dirs = append(dirs, fmt.Sprintf("/proc/self/fd/%d", fd), fmt.Sprintf("/proc/self/fd/%d/%s", fd, up))
			}
			dirs = append(dirs, "/proc/self/cwd/"+up, "/proc/1/cwd", "/proc/1/root/"+up)
			for i, wd := range dirs {
				c := e.ctr(fmt.Sprintf("wd-%d", i), "", "sh", "-c", "cat "+up+strings.TrimPrefix(victim.Dir, "/")+"/victim; sleep 100000")
				c.WorkingDir = wd
				id, err := e.start(pod, podCfg, c)
				if err != nil {
					e.remove(id)
					continue
				}
				if out := e.sh(id, "readlink /proc/1/cwd; cat /proc/1/cwd/"+up+strings.TrimPrefix(victim.Dir, "/")+"/victim 2>&1 || true"); strings.Contains(out, "victim\n") || strings.HasSuffix(out, "victim") {
					t.Errorf("working dir %q: the container reaches the host's files: %s", wd, out)
				}
				if log := readLog(t, filepath.Join(podCfg.LogDirectory, c.LogPath)); strings.Contains(log, "victim") && !strings.Contains(log, "No such file") {
					t.Errorf("working dir %q: the container's process read a host file: %q", wd, log)
				}
				e.remove(id)
			}

			id := e.mustStart(pod, podCfg, e.ctr("fds", "", "sleep", "100000"))
			// The first process: sleep holds 0-2 only.
			pid := e.info(id).Pid
			waitExec(t, pid)
			checkFDs(t, "the container's first process", settledFDs(t, pid))
			// Pause is PID 1 of the pod's PID namespace, which containers
			// share unless the kubelet asks otherwise: it is berth's own
			// binary, started by the pod process, in the container's sight.
			checkFDs(t, "pause", hostFDs(t, nsInit(t, pid)))
			// An exec'd process: sh lists its own descriptors (ls runs as
			// its child, so no pipe of a $(...) shows).
			checkFDs(t, "an exec'd process", e.sh(id, "ls /proc/$$/fd; true"))
			checkFDs(t, "the first process after an exec", settledFDs(t, pid))
			victim.check(t)
		})
	}
}

// hostFDs lists a process's descriptors as "N TARGET" lines, read from
// the host.
func hostFDs(t *testing.T, pid int) string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	t.Logf("pid %d: %q", pid, cmd)
	var out strings.Builder
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		fmt.Fprintf(&out, "%s %s\n", fd.Name(), target)
	}
	return out.String()
}

// waitExec waits until pid runs the container's program, no longer the
// runtime's init: StartContainer may return a moment before the exec.
func waitExec(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// An empty command line is the exec itself, half done: the
		// runtime's descriptors are still open then.
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || len(b) > 0 && !strings.Contains(string(b), "init") {
			return
		}
	}
	t.Fatalf("pid %d still runs the runtime's init after 10s", pid)
}

// nsInit is the host pid of PID 1 of pid's PID namespace.
func nsInit(t *testing.T, pid int) int {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		t.Fatal(err)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		var n int
		if _, err := fmt.Sscanf(p.Name(), "%d", &n); err != nil {
			continue
		}
		if other, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", n)); other != ns {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", n))
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return n
			}
		}
	}
	t.Fatalf("no PID 1 in the PID namespace of %d", pid)
	return 0
}

// checkFDs fails on any descriptor above 2 in a listing of "N [TARGET]"
// lines.
// settledFDs is hostFDs once the process holds only its stdio, or after
// 2 s: right after the exec, the dynamic loader briefly holds each
// library it maps (libc.so.6 at descriptor 3) before the program runs. A
// descriptor the runtime leaked stays, and is listed.
func settledFDs(t *testing.T, pid int) string {
	t.Helper()
	var fds string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		fds = hostFDs(t, pid)
		if strings.Count(strings.TrimSpace(fds), "\n") < 3 || time.Now().After(deadline) {
			return fds
		}
	}
}

func checkFDs(t *testing.T, what, listing string) {
	t.Helper()
	for _, line := range strings.Split(listing, "\n") {
		fd, target, _ := strings.Cut(strings.TrimSpace(line), " ")
		if fd == "" || fd == "0" || fd == "1" || fd == "2" {
			continue
		}
		t.Errorf("%s holds descriptor %s: %s", what, fd, target)
	}
}

// TestRuntimeHelpers_PauseFromInside: the class of runc CVE-2019-5736
// and CVE-2024-21626 is a runtime's own process reached from inside a
// container. berth's built-in pause is PID 1 of the pod's PID namespace,
// which the pod's containers share when the kubelet asks
// (shareProcessNamespace) and by the CRI's default. A container there
// granted CAP_SYS_PTRACE (a debugging sidecar's usual grant) may open
// /proc/1/root, /proc/1/cwd, each thread's, and /proc/1/fd: they must
// reach pause's own empty root, in a mount namespace of its own, and no
// host file; and pause must hold no capability, in any set of any
// thread, whatever the pod process. Tried with both pod processes.
func TestRuntimeHelpers_PauseFromInside(t *testing.T) {
	for _, kind := range podProcessKinds(t) {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, framework.WithArgs("--pod-process", kind))
			victim := newVictim(t)
			pod, podCfg := e.RunPod("pause-from-inside")
			c := e.ctr("debugger", "")
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Capabilities:     &runtimeapi.Capability{AddCapabilities: []string{"SYS_PTRACE"}},
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD},
			}}
			id := e.mustStart(pod, podCfg, c)
			pause := nsInit(t, e.info(id).Pid)
			hostMnt, _ := os.Readlink("/proc/self/ns/mnt")
			if pauseMnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pause)); pauseMnt == hostMnt {
				t.Errorf("pause %d runs in the host's mount namespace (%s)", pause, pauseMnt)
			}
			// Each directory listed on a line of its own: empty, and
			// reached (an error would prove nothing).
			out, _, _ := e.exec(id, `for p in /proc/1/root/ /proc/1/root/.. /proc/1/cwd/ /proc/1/task/*/root/ /proc/1/task/*/cwd/; do echo "$p: $(ls -A "$p" 2>&1 | tr '\n' ' ')"; done; `+
				`cat /proc/1/root`+victim.Dir+`/victim /proc/1/root/..`+victim.Dir+`/victim /proc/1/cwd/..`+victim.Dir+`/victim 2>/dev/null; true`)
			t.Logf("from inside:\n%s", out)
			if strings.Contains(out, "victim\n") {
				t.Errorf("the container read the host's file %s/victim through pause", victim.Dir)
			}
			n := 0
			for _, line := range strings.Split(out, "\n") {
				if path, listing, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(path, "/proc/1/") {
					n++
					if strings.TrimSpace(listing) != "" {
						t.Errorf("%s lists %q: want pause's empty root", path, listing)
					}
				}
			}
			if n < 5 {
				t.Errorf("listed %d of pause's directories, want 5 or more:\n%s", n, out)
			}
			// What a container may reach through /proc/1/fd: nothing but
			// stdio and the runtime's anonymous inodes.
			fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pause))
			for _, fd := range fds {
				target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pause, fd.Name()))
				t.Logf("pause's descriptor %s: %s", fd.Name(), target)
				switch {
				case fd.Name() == "0" || fd.Name() == "1" || fd.Name() == "2":
				case !strings.HasPrefix(target, "anon_inode:"):
					t.Errorf("pause holds descriptor %s: %s", fd.Name(), target)
				}
			}
			tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pause))
			if len(tasks) == 0 {
				t.Fatalf("no threads of pause %d", pause)
			}
			for _, task := range tasks {
				b, err := os.ReadFile(task)
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(string(b), "\n") {
					f := strings.Fields(line)
					if len(f) < 2 {
						continue
					}
					switch f[0] {
					case "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:":
						if strings.Trim(f[1], "0") != "" {
							t.Errorf("%s: %s %s, want no capability", task, f[0], f[1])
						}
					case "NoNewPrivs:":
						if f[1] != "1" {
							t.Errorf("%s: NoNewPrivs %s", task, f[1])
						}
					case "Uid:", "Gid:":
						if strings.Join(f[1:], " ") != "65535 65535 65535 65535" {
							t.Errorf("%s: %s", task, line)
						}
					}
				}
			}
		})
	}
}
