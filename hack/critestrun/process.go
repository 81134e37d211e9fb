package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/test/hostcheck"
)

// process is a runtime's daemon process, the part berth and containerd
// share: started and waited for on its CRI endpoint, and stopped after
// what the specs left is removed.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startAndWait starts cmd and waits up to limit for it to answer on
// endpoint.
func (p *process) startAndWait(ctx context.Context, cmd *exec.Cmd, endpoint string, limit time.Duration) error {
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()
	for deadline := time.Now().Add(limit); ; {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start-up: %s", p.name, cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if hostcheck.Ping(ctx, endpoint) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer on %s in %s", p.name, endpoint, limit)
		}
	}
}

// stop removes whatever a failed spec left (containers, then pods; not a
// leak by itself: what a removal fails to undo is found afterwards) and
// stops the process: SIGTERM, SIGKILL after grace. It returns 1 if the
// process had died during the run, else 0: leftovers are counted by the
// host check.
func (p *process) stop(log *slog.Logger, endpoint string, grace time.Duration) int {
	if p.cmd == nil || p.done == nil {
		return 0
	}
	select {
	case <-p.done:
		log.Error(p.name+" had exited before the end of the run", "state", p.cmd.ProcessState.String())
		return 1
	default:
	}
	if found, failed := hostcheck.RemovePods(context.Background(), log, endpoint); found > 0 {
		log.Info("removed what the specs left", "containers_and_pods", found, "failed", failed)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		log.Error(p.name+" did not stop in time: SIGKILL", "pid", p.cmd.Process.Pid, "after", grace)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return 0
}
