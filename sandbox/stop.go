package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/deadline"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/steps"
	"github.com/berth-runtime/berth/internal/tracing"
)

// Stop stops a pod's containers and pause, detaches it from the network
// (CNI DEL frees its IP) and removes its netns pin and /dev/shm. Stopping
// a stopped or unknown pod succeeds; parts already gone are skipped.
func (m *Manager) Stop(ctx context.Context, id string) error {
	return m.withPod(ctx, id, "StopPodSandbox", func(ctx context.Context, p *pod) error {
		rec, _ := p.snapshot()
		if err := m.stop(ctx, p); err != nil {
			return err
		}
		if rec.State == StateReady {
			m.publish(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, p.rec.ID)
		}
		return nil
	})
}

// withPod runs f, the operation what, on pod id under the pod's operation
// lock, once NRI plugins have caught up. It names the pod in the error,
// once, so that f and what f calls leave that to it. A pod that is
// unknown, or removed meanwhile, is not an error: Stop and Remove are
// idempotent.
func (m *Manager) withPod(ctx context.Context, id, what string, f func(context.Context, *pod) error) error {
	p, err := m.lookup(id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, unblock := m.opts.NRI.BlockSync(ctx)
	defer unblock()
	if err := p.op.LockCtx(ctx, what); err != nil {
		return steps.Name("pod", id, err)
	}
	defer p.op.Unlock()
	if p.removed {
		return nil
	}
	return steps.Name("pod", p.rec.ID, f(ctx, p))
}

// stop stops the pod's containers, tells NRI plugins, then releases what
// the pod holds. The caller holds p.op and names the pod in the error.
func (m *Manager) stop(ctx context.Context, p *pod) error {
	id := p.rec.ID
	if c := m.opts.Containers; c != nil {
		if err := c.StopPodContainers(ctx, id); err != nil {
			return fmt.Errorf("stop containers: %w", err)
		}
	}
	m.opts.Faults.Hit(faultpoint.StopContainers, id)
	// Its containers stopped, its network and pause still there.
	m.nriStop(ctx, p)
	return m.release(ctx, p)
}

// release frees what a running pod holds, each step recorded as it
// succeeds so that a failed stop is resumed where it stopped. The caller
// names the pod in the error.
func (m *Manager) release(ctx context.Context, p *pod) error {
	rec, cfg := p.snapshot()
	id := rec.ID
	var errs []error
	persist := func(f func(*Record)) {
		r := p.update(f)
		if r.State != StateCreating {
			if err := m.records.Put(id, &r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// CNI DEL runs while pause and the pod's monitor stop: the pinned
	// netns outlives pause and the plugins need nothing of it (containerd,
	// too, detaches the network before it stops its pause). DEL is most of
	// a stop: deleting the veth waits for an RCU grace period.
	var del *cniDel
	if rec.Attached {
		del = m.startDel(ctx, p, &rec, cfg)
	}
	var took struct{ pause, runtime time.Duration }
	pauseErr, runtimeErr := func() (error, error) {
		p.mu.RLock()
		proc := p.pause
		p.mu.RUnlock()
		t := time.Now()
		if proc != nil {
			if err := proc.Stop(ctx, m.opts.StopGrace); err != nil {
				return fmt.Errorf("stop pause: %w", err), nil
			}
			proc.Close()
			p.mu.Lock()
			p.pause = nil
			p.mu.Unlock()
		}
		took.pause = time.Since(t)
		t = time.Now()
		// Pause has exited (or never ran): what the runtime keeps running
		// for the pod, its monitor, records the last exits and ends.
		err := m.pause.Stopped(ctx, id)
		took.runtime = time.Since(t)
		return nil, err
	}()
	var cniErr error
	if del != nil {
		cniErr = del.wait(ctx)
		if !errors.Is(cniErr, errDelRunning) {
			p.del = nil
		}
	}
	if pauseErr == nil && cniErr == nil {
		m.opts.Faults.Hit(faultpoint.StopCNIDeleted, id)
	}
	if pauseErr != nil {
		// Pause still runs: the record keeps naming it.
		return errors.Join(pauseErr, cniErr)
	}
	if runtimeErr != nil || cniErr != nil {
		persist(func(r *Record) { r.State, r.PausePid, r.PauseStart = notReady(r.State), 0, 0 })
		return errors.Join(append(errs, runtimeErr, cniErr)...)
	}
	if err := m.netns.Remove(ctx, rec.NetNS); err != nil {
		errs = append(errs, err)
	}
	if err := (podFiles{dir: rec.Dir}).unmountShm(); err != nil {
		errs = append(errs, err)
	}
	persist(func(r *Record) {
		r.State, r.PausePid, r.PauseStart = notReady(r.State), 0, 0
		r.Attached = false
		if len(errs) == 0 {
			r.NetNS = ""
		}
	})
	if len(errs) == 0 && rec.State == StateReady {
		m.log.Info("pod sandbox stopped", "pod", id, "pause", took.pause, "monitor", took.runtime, "cni_del", del.took())
	}
	return errors.Join(errs...)
}

// notReady keeps a creating pod creating (its record is undone as a
// whole), and makes any other pod not ready.
func notReady(s State) State {
	if s == StateCreating {
		return s
	}
	return StateNotReady
}

// errDelRunning is a stop that gave up waiting for its pod's CNI DEL,
// which goes on; the next stop waits for the same DEL.
var errDelRunning = errors.New("CNI DEL still running")

// cniDel is one CNI DEL of a pod, running detached from the calls that
// wait for it.
type cniDel struct {
	done  chan struct{}
	start time.Time
	err   error
	dur   time.Duration
}

// startDel starts the pod's CNI DEL, or returns the one an earlier stop
// left running. The caller holds p.op.
func (m *Manager) startDel(ctx context.Context, p *pod, rec *Record, cfg *runtimeapi.PodSandboxConfig) *cniDel {
	if p.del != nil {
		return p.del
	}
	d := &cniDel{done: make(chan struct{}), start: time.Now()}
	p.del = d
	id, pod := rec.ID, networkPod(rec, cfg)
	// Not cut short by a caller that gives up: a plugin killed half-way
	// leaves what no second DEL finds (the bridge plugin learns the pod's
	// addresses from the link it deletes first, then drops their NAT
	// rules).
	cniCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cniDelTimeout)
	go func() {
		defer cancel()
		defer close(d.done)
		m.opts.Faults.Hit(faultpoint.StopBeforeCNIDel, id)
		cniCtx, span := m.opts.Tracer.Start(cniCtx, "CNI DEL")
		d.err = m.net.Teardown(cniCtx, pod)
		tracing.End(span, d.err)
		d.dur = time.Since(d.start)
	}()
	return d
}

// wait waits for the DEL until shortly before ctx's deadline, and then
// fails naming it: the caller answers in time, the DEL goes on.
func (d *cniDel) wait(ctx context.Context) error {
	t := time.NewTimer(deadline.Budget(ctx, cniDelTimeout+time.Minute))
	defer t.Stop()
	select {
	case <-d.done:
		return d.err
	case <-t.C:
	case <-ctx.Done():
	}
	return fmt.Errorf("%w after %s (it goes on; a retry waits for it): %w",
		errDelRunning, time.Since(d.start).Round(time.Millisecond), context.DeadlineExceeded)
}

// took is how long the DEL ran, for the log.
func (d *cniDel) took() time.Duration {
	if d == nil {
		return 0
	}
	return d.dur
}
