package pods

import (
	"bytes"
	"context"
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

	"github.com/berth-runtime/berth/internal/procstate"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/podproc"
)

// binaries builds berth-podproc (make, as hack/build) and berth-monitor
// (go build, without cgo) once per test binary. Beside them, a stand-in
// for berth-spawn, which both look for but these tests, making no
// container, never run.
var binaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "pods-set-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, monitor.SpawnBinary), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		return dir, err
	}
	builds := []*exec.Cmd{
		exec.Command("make", "-s", "-C", "../podproc/csrc", "OUT="+dir, filepath.Join(dir, podproc.BinaryName)),
		exec.Command("go", "build", "-o", dir+"/", "github.com/berth-runtime/berth/cmd/berth-monitor"),
	}
	builds[1].Env = append(os.Environ(), "CGO_ENABLED=0")
	for _, cmd := range builds {
		if out, err := cmd.CombinedOutput(); err != nil {
			return dir, errors.New(cmd.String() + ": " + err.Error() + "\n" + string(out))
		}
	}
	return dir, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, _ := binaries(); strings.HasPrefix(dir, os.TempDir()) {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// newSet is a Set of kind over state, with the binaries just built.
func newSet(t *testing.T, state, kind string) *Set {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the pods' processes run as root")
	}
	dir, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{State: state, RuncRoot: filepath.Join(state, "runc"), Kind: kind,
		MonitorBinary: filepath.Join(dir, monitor.BinaryName), PodProcBinary: filepath.Join(dir, podproc.BinaryName)})
	t.Cleanup(s.Close)
	return s
}

// fakePause is a process standing for a pod's pause: not the pod
// process's child, so that only the Set can end it.
func fakePause(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// exited tells whether cmd exits within a few seconds.
func exited(cmd *exec.Cmd) bool {
	done := make(chan struct{})
	go func() { cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

// waitGone waits until pid no longer exists (reaped by its parent).
func waitGone(pid int) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
	}
	return errors.New("pod process " + strconv.Itoa(pid) + " still runs")
}

// waitStopped waits until every thread of pid is stopped: a SIGSTOP
// stops a process only once one of its threads runs to take it, and
// meanwhile, on a busy machine, another thread may still answer a ping.
func waitStopped(pid int) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, t := range tasks {
			data, err := os.ReadFile(t)
			// The state follows the command, which ends at the last ')'.
			if i := bytes.LastIndexByte(data, ')'); err != nil || i < 0 || i+2 >= len(data) || data[i+2] != 'T' {
				stopped = false
			}
		}
		if stopped {
			return nil
		}
	}
	return errors.New("pod process " + strconv.Itoa(pid) + " did not stop")
}

var kinds = []string{KindC, KindMonitor}

// start starts pod's process through s and returns its pid, as it answers.
func start(t *testing.T, s *Set, pod string) int {
	t.Helper()
	c, err := s.Start(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := c.Ping(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestStartRestartStop: a pod's process is of the kind asked for, is
// spoken to in its own protocol by a later berth whatever that one's kind,
// and stops and is removed leaving nothing.
func TestStartRestartStop(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			state := t.TempDir()
			s := newSet(t, state, kind)
			pid := start(t, s, "pod1")
			want := map[string]string{KindC: podproc.BinaryName, KindMonitor: monitor.BinaryName}[kind]
			if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) != want {
				t.Errorf("pod process %d is %q, want %s", pid, comm, want)
			}

			// A restarted berth asking for the other kind still reaches it.
			other := map[string]string{KindC: KindMonitor, KindMonitor: KindC}[kind]
			later := newSet(t, state, other)
			if got, err := later.Client("pod1").Ping(ctx); err != nil || got != pid {
				t.Fatalf("after a restart: ping = %d, %v; want %d", got, err, pid)
			}

			if err := later.Stop(ctx, "pod1", func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := later.Remove("pod1"); err != nil {
				t.Fatal(err)
			}
			if err := waitGone(pid); err != nil {
				t.Error(err)
			}
			if _, err := os.Stat(monitor.PathsFor(state, "pod1").Dir); !os.IsNotExist(err) {
				t.Errorf("the pod's monitor dir is left: %v", err)
			}
			if _, err := later.Client("pod1").Ping(ctx); !errors.Is(err, monitor.ErrUnreachable) {
				t.Errorf("ping after remove: %v, want ErrUnreachable", err)
			}
		})
	}
}

// TestDeathEndsPause: a pod's process that dies unasked takes its pause
// with it (nobody would record pause's exit), and only its own.
func TestDeathEndsPause(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			s := newSet(t, t.TempDir(), kind)
			pid := start(t, s, "pod1")
			pause, bystander := fakePause(t), fakePause(t)
			s.PauseStarted("pod1", pause.Process.Pid)
			syscall.Kill(pid, syscall.SIGKILL)
			if !exited(pause) {
				t.Error("pause outlived its pod's process")
			}
			if syscall.Kill(bystander.Process.Pid, 0) != nil {
				t.Error("a process that was not the pod's pause was killed")
			}
		})
	}
}

// TestAdopt: after a restart, a pod's process that is gone, or that does
// not know the pause berth recorded, has that pause killed; one that does
// not answer is marked silent and its pause kept.
func TestAdopt(t *testing.T) {
	for _, kind := range kinds {
		for _, tc := range []struct {
			name       string
			before     func(pid int)
			wantSilent bool
		}{
			{name: "gone", before: func(pid int) { syscall.Kill(pid, syscall.SIGKILL); waitGone(pid) }},
			{name: "pause unknown", before: func(int) {}},
			{name: "silent", before: func(pid int) { syscall.Kill(pid, syscall.SIGSTOP); waitStopped(pid) }, wantSilent: true},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				state := t.TempDir()
				s := newSet(t, state, kind)
				pid := start(t, s, "pod1")
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
				s.Close() // berth goes: nothing watches the process now
				pause := fakePause(t)
				tc.before(pid)

				later := newSet(t, state, kind)
				actx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				err := later.Adopt(actx, "pod1", pause.Process.Pid, procstate.StartTime(pause.Process.Pid))
				if err == nil {
					t.Fatal("adopted a pod whose process does not hold its pause")
				}
				if got := later.Silent("pod1"); got != tc.wantSilent {
					t.Errorf("silent = %v, want %v (%v)", got, tc.wantSilent, err)
				}
				if tc.wantSilent {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("err = %v, want the deadline", err)
					}
					if syscall.Kill(pause.Process.Pid, 0) != nil {
						t.Error("the pause of a silent pod process was killed")
					}
					return
				}
				if !errors.Is(err, ErrPauseGone) {
					t.Errorf("err = %v, want ErrPauseGone", err)
				}
				if !exited(pause) {
					t.Error("a pause left without its pod's process still runs")
				}
			})
		}
	}
}
