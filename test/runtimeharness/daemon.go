// Package runtimeharness starts and stops the CRI runtimes the test runners
// drive (test/conformance/critest, test/conformance/nodee2e, bench/density): a berth or a
// containerd daemon on temp roots with a configuration rendered here, and
// the host checks after it that tell what a run left (a leak) from what
// others own.
package runtimeharness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/test/hostcheck"
)

// Daemon is a runtime's daemon process, answering CRI on Endpoint once up.
type Daemon struct {
	Name     string   // in messages: "berth", "containerd"
	Argv     []string // the command line, Argv[0] the binary
	Env      []string // added to this process's environment
	Endpoint string   // unix:///path of its CRI socket
	LogPath  string   // its stdout and stderr, created by Start
	// ReadyIn bounds the wait for the first answer on Endpoint.
	ReadyIn time.Duration
	// OwnGroup starts it in a process group of its own, so that a signal
	// to the runner's group (^C in a terminal) reaches the runner first
	// and the runner stops the daemon after cleaning up through it.
	OwnGroup bool

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// Start starts the daemon and waits until it answers on its endpoint.
func (d *Daemon) Start(ctx context.Context) error {
	out, err := os.Create(d.LogPath)
	if err != nil {
		return fmt.Errorf("%s log: %w", d.Name, err)
	}
	defer out.Close()
	cmd := exec.Command(d.Argv[0], d.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	if len(d.Env) > 0 {
		cmd.Env = append(os.Environ(), d.Env...)
	}
	if d.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	d.cmd, d.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(d.done) }()
	return d.waitReady(ctx)
}

func (d *Daemon) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(d.ReadyIn)
	for {
		select {
		case <-d.done:
			return fmt.Errorf("%s exited during start-up (%s); its log: %s", d.Name, d.cmd.ProcessState, d.LogPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		err := hostcheck.Ping(ctx, d.Endpoint)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering on %s after %s: %w", d.Name, d.Endpoint, d.ReadyIn, err)
		}
	}
}

// Pid is the daemon's process id, 0 before Start.
func (d *Daemon) Pid() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Stop stops a daemon that Start started. If it had exited during the run
// it logs that and returns 1. Otherwise it first runs clean, which removes
// through the endpoint what the run left in the runtime and returns the
// leaks it counts (nil: nothing), then sends SIGTERM, SIGKILL after grace.
func (d *Daemon) Stop(log *slog.Logger, grace time.Duration, clean func(endpoint string) int) int {
	if d.cmd == nil || d.done == nil {
		return 0
	}
	select {
	case <-d.done:
		log.Error(d.Name+" exited during the run", "state", d.cmd.ProcessState.String())
		return 1
	default:
	}
	leaks := 0
	if clean != nil {
		leaks = clean(d.Endpoint)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		log.Error(d.Name+" did not stop in time: SIGKILL", "pid", d.cmd.Process.Pid, "after", grace)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return leaks
}

// Version is what a binary prints, trimmed, when asked its version with
// flag ("--version", "-version"); "" if it fails.
func Version(bin, flag string) string {
	out, err := exec.Command(bin, flag).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// WriteConfig writes a configuration file and copies of it (into a
// report directory; a copy that fails is only a missing report file).
func WriteConfig(path string, data []byte, copies ...string) error {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	for _, c := range copies {
		_ = os.WriteFile(c, data, 0o644)
	}
	return nil
}
