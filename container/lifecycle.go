package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/procstate"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/pods"
)

// ReasonMonitorGone is the exit reason of a container whose monitor died:
// nobody could see how its process ended.
const ReasonMonitorGone = "MonitorGone"

// ReasonCreateFailed is the exit reason of a container whose create failed
// and could not be undone: kept for RemoveContainer to release, it never
// ran.
const ReasonCreateFailed = "CreateFailed"

// watch waits, through the pod's monitor, for the container to exit and
// records the exit. It is how berth learns of exits without polling.
func (s *Service) watch(c *ctr, mon pods.Client) {
	id := c.snapshot().ID
	for {
		resp, err := mon.Wait(s.ctx, id)
		switch {
		case err == nil && resp.Exit != nil:
			s.setExit(c, resp.Exit, "")
			return
		case s.ctx.Err() != nil:
			return
		case errors.Is(err, monitor.ErrUnreachable) || monitor.IsCode(err, monitor.CodeNotFound):
			s.monitorGone(c)
			return
		case errors.Is(err, monitor.ErrVersion):
			// The monitor runs the container, but not in a protocol this
			// berth speaks: the container stays as recorded, and every
			// call to it says why (a berth that speaks it takes over).
			s.log.Error("pod monitor speaks a protocol this berth cannot serve: container kept as recorded", "container", id, "pod", c.snapshot().PodID, "error", err)
			return
		default:
			s.log.Warn("wait for container exit", "container", id, "error", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// monitorGone ends a container whose monitor died. The monitor may have
// recorded the exit before dying; otherwise the process, if it still
// runs, is killed: no one would log its output or see it exit.
func (s *Service) monitorGone(c *ctr) {
	rec := c.snapshot()
	if e, err := monitor.ReadExit(rec.Dir); err == nil && e != nil {
		s.setExit(c, e, "")
		return
	}
	if rec.Pid > 0 && rec.PidStart != 0 && procstate.StartTime(rec.Pid) == rec.PidStart {
		procstate.Kill(rec.Pid)
	}
	s.log.Warn("container's monitor is gone", "container", rec.ID, "pod", rec.PodID)
	s.setExit(c, &monitor.Exit{Code: 255, FinishedAt: time.Now(),
		Message: "the pod's monitor process is gone: the container's exit status is unknown"}, ReasonMonitorGone)
}

func (s *Service) setExit(c *ctr, e *monitor.Exit, reason string) {
	c.mu.Lock()
	if c.isExited() {
		c.mu.Unlock()
		return
	}
	c.rec.State, c.rec.Exit, c.rec.Reason = StateExited, e, reason
	rec := c.rec
	removed := c.removed
	c.stopPending = c.starting
	later := c.starting
	// On disk before it is announced: a RemoveContainer waiting for the
	// exit deletes the record next, and a write landing after that would
	// bring back the record of a removed container.
	if !removed {
		if err := s.records.Put(rec.ID, &rec); err != nil {
			s.log.Error("record container exit", "container", rec.ID, "error", err)
		}
	}
	close(c.exited)
	c.mu.Unlock()
	if !removed && !rec.Sandbox && s.opts.NRI.Enabled() {
		s.opts.NRI.ContainerExited(c.nriDescribe())
	}
	if !removed && !later {
		s.publish(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, &rec)
	}
}

// Start is StartContainer.
func (s *Service) Start(ctx context.Context, id string) error {
	c, err := s.lookup(id)
	if err != nil {
		return err
	}
	ctx, unblock := s.opts.NRI.BlockSync(ctx)
	defer unblock()
	return s.start(ctx, c)
}

func (s *Service) start(ctx context.Context, c *ctr) error {
	c.op.Lock()
	defer c.op.Unlock()
	rec := c.snapshot()
	if rec.State != StateCreated || c.isExited() {
		return fmt.Errorf("%w: container %s is %s, not created", ErrState, rec.ID, rec.State)
	}
	if !rec.Sandbox && s.opts.NRI.Enabled() {
		if err := s.opts.NRI.StartContainer(ctx, c.nriDescribe()); err != nil {
			return fmt.Errorf("container %s: %w", rec.ID, err)
		}
	}
	mon := s.podProc(rec.PodID)
	c.mu.Lock()
	c.starting = true
	c.mu.Unlock()
	// Taken before the call: the process runs from within it, and may
	// have exited by the time it returns.
	startedAt := time.Now().UnixNano()
	if !rec.Sandbox {
		s.opts.Faults.Hit(faultpoint.StartBefore, rec.ID)
	}
	var pid int
	var err error
	if rec.Restore {
		_, span := s.opts.Tracer.Start(ctx, "CRIU restore")
		pid, err = s.restoreStart(ctx, mon, c, &rec)
		tracing.End(span, err)
	} else {
		_, span := s.opts.Tracer.Start(ctx, "libcontainer start")
		err = mon.Start(ctx, rec.ID)
		tracing.End(span, err)
	}
	if err == nil && !rec.Sandbox {
		s.opts.Faults.Hit(faultpoint.StartStarted, rec.ID)
	}
	c.mu.Lock()
	stopped := c.stopPending
	c.starting, c.stopPending = false, false
	if err != nil {
		rec = c.rec
		c.mu.Unlock()
		if stopped {
			s.publish(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, &rec)
		}
		return fmt.Errorf("container %s: start: %w", rec.ID, err)
	}
	if pid > 0 {
		c.rec.Pid, c.rec.PidStart = pid, procstate.StartTime(pid)
		if c.isExited() {
			// Stopped while CRIU restored it (stopUnrestored), or
			// ended meanwhile, when the kill finds nothing to kill.
			defer s.killRestored(ctx, mon, rec.ID)
		}
	}
	if !c.isExited() {
		c.rec.State = StateRunning
	}
	c.rec.StartedAt = startedAt
	rec = c.rec
	c.mu.Unlock()
	if err := s.records.Put(rec.ID, &rec); err != nil {
		// The container runs whatever the disk (full, say) lets berth
		// write: an error would tell the kubelet it does not. A restart
		// learns the state from the monitor (recover.go).
		s.log.Error("record container start", "container", rec.ID, "error", err)
	}
	if rec.Restore {
		s.releaseResets(ctx, &rec)
	}
	s.publish(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, &rec)
	if stopped {
		s.publish(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, &rec)
	}
	if !rec.Sandbox && s.opts.NRI.Enabled() {
		s.opts.NRI.PostStartContainer(ctx, c.nriDescribe())
	}
	return nil
}

// Stop is StopContainer: the stop signal, then SIGKILL once timeout has
// passed (at once for a zero timeout). It returns when the container has
// exited. Stopping an exited or unknown container succeeds (CRI
// idempotence: the kubelet retries a stop whose answer it missed).
func (s *Service) Stop(ctx context.Context, id string, timeout time.Duration) error {
	c, err := s.lookup(id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, unblock := s.opts.NRI.BlockSync(ctx)
	defer unblock()
	if err := s.stop(ctx, c, timeout); err != nil {
		return err
	}
	s.nriStopped(ctx, c)
	return nil
}

func (s *Service) stop(ctx context.Context, c *ctr, timeout time.Duration) error {
	if c.isExited() {
		return nil
	}
	rec := c.snapshot()
	if restorePending(&rec) {
		s.stopUnrestored(c)
		return nil
	}
	mon := s.podProc(rec.PodID)
	signal := func(sig syscall.Signal) error {
		err := mon.Signal(ctx, rec.ID, sig)
		if err == nil || monitor.IsCode(err, monitor.CodeNotRunning) {
			return nil
		}
		if errors.Is(err, monitor.ErrUnreachable) {
			s.monitorGone(c)
			return nil
		}
		return fmt.Errorf("container %s: signal %s: %w", rec.ID, sig, err)
	}
	// A container never started has nothing to shut down gracefully.
	if timeout > 0 && rec.State == StateRunning {
		sig, err := s.stopSignal(c)
		if err != nil {
			return err
		}
		if err := signal(sig); err != nil {
			return err
		}
		s.opts.Faults.Hit(faultpoint.StopCtrSignalled, rec.ID)
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-c.exited:
			return nil
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("container %s: stop: %w", rec.ID, ctx.Err())
		}
	}
	if err := signal(syscall.SIGKILL); err != nil {
		return err
	}
	// SIGKILL ends a process at once unless it sits in the kernel where
	// no signal reaches (a read from a FUSE server that does not answer):
	// then the caller learns which processes are stuck and where, rather
	// than waiting as long as it lets us.
	t := time.NewTimer(procstate.KillWait)
	defer t.Stop()
	select {
	case <-c.exited:
		return nil
	case <-t.C:
		return fmt.Errorf("container %s: %w: still running %s after SIGKILL: %s", rec.ID, ErrTimeout, procstate.KillWait, s.stuckProcesses(c))
	case <-ctx.Done():
		return fmt.Errorf("container %s: wait for exit after SIGKILL: %w: %s", rec.ID, ctx.Err(), s.stuckProcesses(c))
	}
}

// Remove is RemoveContainer: a running container is killed first. The log
// file stays: it belongs to the kubelet. Removing an unknown container
// succeeds.
func (s *Service) Remove(ctx context.Context, id string) error {
	c, err := s.lookup(id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, unblock := s.opts.NRI.BlockSync(ctx)
	defer unblock()
	c.op.Lock()
	defer c.op.Unlock()
	if c.removed {
		return nil
	}
	if err := s.stop(ctx, c, 0); err != nil {
		return err
	}
	rec := c.snapshot()
	if err := s.release(ctx, &rec); err != nil {
		return err
	}
	c.mu.Lock()
	c.removed = true
	c.mu.Unlock()
	s.mu.Lock()
	delete(s.ctrs, rec.ID)
	s.mu.Unlock()
	if cfg, err := decodeConfig(rec.Config); err == nil {
		s.names.Release(nameKey(rec.PodID, cfg.GetMetadata()), rec.ID)
	}
	if s.opts.NRI.Enabled() {
		s.opts.NRI.RemoveContainer(ctx, c.nriDescribe())
	}
	s.publish(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, &rec)
	return nil
}

// release frees everything an exited (or half-created) container holds,
// in an order that a retry after a failure can resume.
func (s *Service) release(ctx context.Context, rec *Record) error {
	mon := s.podProc(rec.PodID)
	err := mon.Delete(ctx, rec.ID)
	switch {
	case errors.Is(err, monitor.ErrUnreachable):
		// The monitor died before it could clean up after the process.
		if err := s.dropRuntimeState(rec.ID); err != nil {
			return fmt.Errorf("container %s: %w", rec.ID, err)
		}
	case err != nil && !monitor.IsCode(err, monitor.CodeNotFound):
		return fmt.Errorf("container %s: remove from monitor: %w", rec.ID, err)
	}
	if !rec.Sandbox {
		s.opts.Faults.Hit(faultpoint.RemoveCtrMonitor, rec.ID)
	}
	// The rootfs's unmount syncs the writable layer's filesystem (the
	// host's, with every other writer's dirty pages): tens of seconds on a
	// busy disk, so it is waited for as long as the caller allows, and a
	// retry joins it.
	if err := s.fs.Do(ctx, "unmount", rec.Dir, func(func(string)) error { return unmountContainerDir(rec.Dir) }); err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	// What is mounted below the container's dirs besides berth's own
	// mounts (by hand, say a FUSE mount in its writable layer) is
	// detached too: a removal must never reach into a mount, where a
	// filesystem that does not answer would hold it forever.
	if err := s.unmountBelow(ctx, rec.Dir, rec.Upper); err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	for _, d := range []string{rec.Dir, rec.Upper} {
		if err := s.fs.Do(ctx, "remove", d, func(func(string)) error { return os.RemoveAll(d) }); err != nil {
			return fmt.Errorf("container %s: %w", rec.ID, err)
		}
	}
	if err := s.opts.Images.Release(ctx, rec.ID); err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	if err := s.releaseImageVolumes(ctx, rec.ImageVolumes); err != nil {
		return fmt.Errorf("container %s: image volumes: %w", rec.ID, err)
	}
	if err := s.records.Delete(rec.ID); err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err)
	}
	return nil
}

func (s *Service) podContainers(podID string) []*ctr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*ctr
	for _, c := range s.ctrs {
		if c.snapshot().PodID == podID && !c.rec.Sandbox {
			out = append(out, c)
		}
	}
	return out
}

// StopPodContainers kills every container of a pod (the kubelet already
// stopped them gracefully before it stops the pod), side by side: each one
// stuck in the kernel costs its wait once, not once per container.
func (s *Service) StopPodContainers(ctx context.Context, podID string) error {
	ctrs := s.podContainers(podID)
	errs := make([]error, len(ctrs))
	var wg sync.WaitGroup
	for i, c := range ctrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = s.stop(ctx, c, 0); errs[i] == nil {
				s.nriStopped(ctx, c)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RemovePodContainers removes every container of a pod. The pod's monitor
// and infra container go with the pod (RemovePodMonitor).
func (s *Service) RemovePodContainers(ctx context.Context, podID string) error {
	var errs []error
	for _, c := range s.podContainers(podID) {
		errs = append(errs, s.Remove(ctx, c.snapshot().ID))
	}
	return errors.Join(errs...)
}
