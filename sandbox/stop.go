package sandbox

import (
	"context"
	"errors"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stop stops a pod's containers and pause, detaches it from the network
// (CNI DEL frees its IP) and removes its netns pin and /dev/shm. Stopping
// a stopped or unknown pod succeeds; parts already gone are skipped.
func (m *Manager) Stop(ctx context.Context, id string) error {
	p, err := m.lookup(id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	p.op.Lock()
	defer p.op.Unlock()
	if p.removed {
		return nil
	}
	if c := m.opts.Containers; c != nil {
		if err := c.StopPodContainers(ctx, p.rec.ID); err != nil {
			return fmt.Errorf("pod %s: stop containers: %w", p.rec.ID, err)
		}
	}
	rec, _ := p.snapshot()
	if err := m.release(ctx, p); err != nil {
		return err
	}
	if rec.State == StateReady {
		m.publish(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, rec.ID)
	}
	return nil
}

// release frees what a running pod holds, each step recorded as it
// succeeds so that a failed stop is resumed where it stopped.
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
	p.mu.RLock()
	proc := p.pause
	p.mu.RUnlock()
	if proc != nil {
		if err := proc.Stop(ctx, m.opts.StopGrace); err != nil {
			return fmt.Errorf("pod %s: stop pause: %w", id, err)
		}
		proc.Close()
		p.mu.Lock()
		p.pause = nil
		p.mu.Unlock()
	}
	// Pause has exited (or never ran): what the runtime keeps running for
	// the pod, its monitor, records the last exits and ends.
	if err := m.pause.Stopped(ctx, id); err != nil {
		persist(func(r *Record) { r.State, r.PausePid, r.PauseStart = notReady(r.State), 0, 0 })
		return errors.Join(append(errs, fmt.Errorf("pod %s: %w", id, err))...)
	}
	if rec.Attached {
		if err := m.net.Teardown(ctx, networkPod(&rec, cfg)); err != nil {
			persist(func(r *Record) { r.State, r.PausePid, r.PauseStart = notReady(r.State), 0, 0 })
			return errors.Join(append(errs, err)...)
		}
	}
	if err := m.netns.Remove(ctx, rec.NetNS); err != nil {
		errs = append(errs, fmt.Errorf("pod %s: %w", id, err))
	}
	if err := (podFiles{dir: rec.Dir}).unmountShm(); err != nil {
		errs = append(errs, fmt.Errorf("pod %s: %w", id, err))
	}
	persist(func(r *Record) {
		r.State, r.PausePid, r.PauseStart = notReady(r.State), 0, 0
		r.Attached = false
		if len(errs) == 0 {
			r.NetNS = ""
		}
	})
	if len(errs) == 0 && rec.State == StateReady {
		m.log.Info("pod sandbox stopped", "pod", id)
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
