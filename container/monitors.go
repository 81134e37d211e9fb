package container

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/berth-runtime/berth/container/monitor"
)

// podMonitor is berth's handle on one pod's monitor process.
type podMonitor struct {
	client *monitor.Client
	paths  monitor.Paths
}

// monitorFor returns the pod's monitor, starting it if it does not run:
// the first container of a pod starts it, and it then lives as long as the
// pod has containers.
func (s *Service) monitorFor(ctx context.Context, podID string) (*podMonitor, error) {
	s.monMu.Lock()
	defer s.monMu.Unlock()
	if m, ok := s.monitors[podID]; ok {
		if _, err := m.client.Call(ctx, &monitor.Request{Op: monitor.OpPing}); err == nil {
			return m, nil
		}
	}
	paths := monitor.PathsFor(s.opts.State, podID)
	m := &podMonitor{client: &monitor.Client{Socket: paths.Socket}, paths: paths}
	// A monitor from before a berth restart is adopted as it is.
	if _, err := m.client.Call(ctx, &monitor.Request{Op: monitor.OpPing}); err == nil {
		s.monitors[podID] = m
		return m, nil
	}
	bin, err := s.monitorBinary()
	if err != nil {
		return nil, err
	}
	if _, err := monitor.Start(ctx, monitor.StartOptions{Binary: bin, PodID: podID, Paths: paths, RuncRoot: s.runc}); err != nil {
		return nil, err
	}
	s.monitors[podID] = m
	return m, nil
}

// existingMonitor returns a handle on the pod's monitor without starting
// one; calls through it fail with monitor.ErrUnreachable if it is gone.
func (s *Service) existingMonitor(podID string) *podMonitor {
	s.monMu.Lock()
	defer s.monMu.Unlock()
	if m, ok := s.monitors[podID]; ok {
		return m
	}
	paths := monitor.PathsFor(s.opts.State, podID)
	m := &podMonitor{client: &monitor.Client{Socket: paths.Socket}, paths: paths}
	s.monitors[podID] = m
	return m
}

// stopMonitor ends the pod's monitor once it has no container left.
func (s *Service) stopMonitor(ctx context.Context, podID string) error {
	s.monMu.Lock()
	defer s.monMu.Unlock()
	paths := monitor.PathsFor(s.opts.State, podID)
	c := &monitor.Client{Socket: paths.Socket}
	_, err := c.Call(ctx, &monitor.Request{Op: monitor.OpShutdown})
	if err != nil && !errors.Is(err, monitor.ErrUnreachable) {
		return fmt.Errorf("pod %s: stop monitor: %w", podID, err)
	}
	delete(s.monitors, podID)
	os.Remove(paths.Socket)
	if err := os.RemoveAll(paths.Dir); err != nil {
		return fmt.Errorf("pod %s: remove monitor dir: %w", podID, err)
	}
	return nil
}
