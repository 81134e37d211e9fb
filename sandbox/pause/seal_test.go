package pause

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// asPause makes the test binary run Main instead of the tests: the Go
// pause, started (and executed again by itself) as berth starts it.
const asPause = "BERTH_PAUSE_TEST_AS_PAUSE"

func TestMain(m *testing.M) {
	if os.Getenv(asPause) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestSealed: both pauses, the Go one here and the C one of berth-pause,
// started as berth starts them (new PID, UTS and IPC namespaces, the sync
// pipe on fd 3), apply the hostname and a sysctl in the pod's namespaces,
// then end up in a mount namespace of their own whose only mount is an
// empty read-only root, every thread without capabilities, as 65535; they
// still reap orphans and exit 0 on SIGTERM.
func TestSealed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, mounts)")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/berth-runtime/berth/cmd/berth-pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build berth-pause: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		cmd  *exec.Cmd
	}{
		{"go", exec.Command(os.Args[0], "-h", "sealed-go", "-s", "kernel/shm_rmid_forced=1")},
		{"c", exec.Command(filepath.Join(dir, "berth-pause"), "-h", "sealed-c", "-s", "kernel/shm_rmid_forced=1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd
			cmd.Env = []string{"GOMAXPROCS=1"}
			if tc.name == "go" {
				cmd.Env = append(cmd.Env, asPause+"=1")
			}
			cmd.Dir = "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			cmd.ExtraFiles = []*os.File{w} // SyncFD
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			done := false
			defer func() {
				if !done {
					cmd.Process.Kill()
					cmd.Wait()
				}
			}()
			r.SetReadDeadline(time.Now().Add(10 * time.Second))
			if msg, err := io.ReadAll(r); err != nil || string(msg) != "ok" {
				t.Fatalf("pause's report: %q %v", msg, err)
			}
			pid := cmd.Process.Pid
			proc := fmt.Sprintf("/proc/%d", pid)

			// Set up in the pod's namespaces, before the seal.
			if _, err := exec.LookPath("nsenter"); err == nil {
				for ns, want := range map[string]string{"-u hostname": "sealed-" + tc.name, "-i cat /proc/sys/kernel/shm_rmid_forced": "1"} {
					out, err := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(pid)}, strings.Fields(ns)...)...).Output()
					if got := strings.TrimSpace(string(out)); err != nil || got != want {
						t.Errorf("nsenter %s: %q %v, want %q", ns, got, err, want)
					}
				}
			}

			self, _ := os.Readlink("/proc/self/ns/mnt")
			if mnt, _ := os.Readlink(proc + "/ns/mnt"); mnt == self {
				t.Errorf("pause is in the host's mount namespace %s", mnt)
			}
			mi, _ := os.ReadFile(proc + "/mountinfo")
			if lines := strings.Split(strings.TrimSpace(string(mi)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], " / / ro,") || !strings.Contains(lines[0], " tmpfs ") {
				t.Errorf("pause's mounts, want one read-only tmpfs at /:\n%s", mi)
			}
			tasks, _ := filepath.Glob(proc + "/task/*")
			if len(tasks) == 0 {
				t.Fatal("pause has no threads")
			}
			for _, task := range tasks {
				for _, d := range []string{"root/", "root/../", "cwd/"} { // not filepath.Join: it would clean the ".."
					if ents, err := os.ReadDir(task + "/" + d); err != nil || len(ents) != 0 {
						t.Errorf("%s/%s: %d entries, %v; want empty", task, d, len(ents), err)
					}
				}
				status, _ := os.ReadFile(task + "/status")
				for _, line := range strings.Split(string(status), "\n") {
					f := strings.Fields(line)
					if len(f) < 2 {
						continue
					}
					switch f[0] {
					case "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:":
						if strings.Trim(f[1], "0") != "" {
							t.Errorf("%s: %s %s, want none", task, f[0], f[1])
						}
					case "NoNewPrivs:":
						if f[1] != "1" {
							t.Errorf("%s: %s", task, line)
						}
					case "Uid:", "Gid:":
						if strings.Join(f[1:], " ") != "65535 65535 65535 65535" {
							t.Errorf("%s: %s", task, line)
						}
					}
				}
			}
			fds, _ := os.ReadDir(proc + "/fd")
			for _, fd := range fds {
				target, _ := os.Readlink(proc + "/fd/" + fd.Name())
				if fd.Name() > "2" && !strings.HasPrefix(target, "anon_inode:") {
					t.Errorf("pause holds descriptor %s: %s", fd.Name(), target)
				}
			}

			// Still PID 1 that reaps: a process orphaned in its PID
			// namespace is pause's child, then gone once it exits.
			if _, err := exec.LookPath("nsenter"); err == nil {
				if out, err := exec.Command("nsenter", "-t", fmt.Sprint(pid), "-p", "sh", "-c", "sleep 0.3 & exit 0").CombinedOutput(); err != nil {
					t.Fatalf("orphan: %v %s", err, out)
				}
				children := proc + fmt.Sprintf("/task/%d/children", pid)
				deadline := time.Now().Add(5 * time.Second)
				for {
					kids, _ := os.ReadFile(children)
					if len(strings.TrimSpace(string(kids))) == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("pause did not reap its orphans: %s", kids)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			done = true
			if err := cmd.Wait(); err != nil {
				t.Fatalf("pause after SIGTERM: %v", err)
			}
		})
	}
}
