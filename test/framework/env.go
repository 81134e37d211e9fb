package framework

import (
	"syscall"
	"time"
)

// SetEnv replaces the KEY=VALUE entries the daemon gets on top of the
// test's environment (first given with WithEnv) from its next start on:
// a crash test arms a fault point for one run and restarts without it.
func (d *Daemon) SetEnv(env ...string) { d.env = env }

// dumpStacks makes a daemon that never became ready write its goroutines
// into its log (Go's SIGQUIT handler) and exit, so that the log dumped
// with the failure shows where it hangs.
func (d *Daemon) dumpStacks() {
	if !d.Running() {
		return
	}
	_ = syscall.Kill(d.PID, syscall.SIGQUIT)
	select {
	case <-d.proc.done:
	case <-time.After(5 * time.Second):
	}
}

// Launch starts a daemon that is not running again, without waiting for
// it to serve: a crash test kills it during its start-up, at a fault
// point of its recovery. Kill, Restart and cleanup work on it as usual.
func (d *Daemon) Launch() {
	d.t.Helper()
	if d.Running() {
		d.t.Fatal("Launch: berth is still running")
	}
	if err := d.spawn(); err != nil {
		d.t.Fatalf("launch berth: %v", err)
	}
}
