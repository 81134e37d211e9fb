package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
)

// podMonitor is berth's handle on one pod's monitor process. The monitor
// is started with the pod (StartPause) and lives until the pod stops.
type podMonitor struct {
	client *monitor.Client
	paths  monitor.Paths

	// stopping is set once the pod is being stopped: the monitor's exit is
	// then expected.
	stopping atomic.Bool
	// gone is closed once the monitor process has exited; nil while
	// nothing watches it.
	gone chan struct{}

	mu sync.Mutex
	// The pod's pause (built in or infra container), killed if the monitor
	// dies: no one would record its exit any more.
	pausePid   int
	pauseStart uint64
}

func (s *Service) newMonitor(podID string) *podMonitor {
	paths := monitor.PathsFor(s.opts.State, podID)
	return &podMonitor{client: &monitor.Client{Socket: paths.Socket}, paths: paths}
}

// startMonitor starts the pod's monitor and watches it.
func (s *Service) startMonitor(ctx context.Context, podID string) (*podMonitor, error) {
	bin, err := s.monitorBinary()
	if err != nil {
		return nil, err
	}
	m := s.newMonitor(podID)
	proc, err := monitor.Start(ctx, monitor.StartOptions{Binary: bin, PodID: podID, Paths: m.paths, RuncRoot: s.runc, CgroupDriver: string(s.opts.CgroupDriver)})
	if err != nil {
		return nil, err
	}
	if err := s.watchMonitor(podID, m, proc.Pid, proc); err != nil {
		proc.Kill()
		proc.Wait()
		return nil, fmt.Errorf("pod %s: %w", podID, err)
	}
	s.monMu.Lock()
	s.monitors[podID] = m
	s.monMu.Unlock()
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
	m := s.newMonitor(podID)
	s.monitors[podID] = m
	return m
}

// watchMonitor notices the monitor's exit through a pidfd (no thread
// blocked, no polling). An exit nobody asked for ends the pod's pause, so
// that the pod is seen not ready; its containers see the monitor gone
// through their own watchers. proc, when berth started the monitor, is
// reaped.
func (s *Service) watchMonitor(podID string, m *podMonitor, pid int, proc *os.Process) error {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("watch monitor %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	m.gone = make(chan struct{})
	stop := context.AfterFunc(s.ctx, func() { f.Close() })
	go func() {
		err := waitPidfd(f)
		stop()
		f.Close()
		if err != nil {
			return // berth is closing
		}
		if proc != nil {
			proc.Wait()
		}
		close(m.gone)
		if m.stopping.Load() {
			return
		}
		m.mu.Lock()
		pid, start := m.pausePid, m.pauseStart
		m.mu.Unlock()
		s.log.Warn("pod monitor exited: ending the pod's pause", "pod", podID, "pause", pid)
		if pid > 0 && processStart(pid) == start {
			unix.Kill(pid, unix.SIGKILL)
		}
	}()
	return nil
}

// waitPidfd returns once the process behind a non-blocking pidfd has
// exited, parked in the netpoller; an error means the file was closed.
func waitPidfd(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(func(fd uintptr) bool {
		n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0
	})
}

// shutdownTries bounds how often a pod's stop asks its monitor to exit
// while containers made during the stop keep it.
const shutdownTries = 3

// stopMonitor lets the pod's monitor exit once pause and every container
// have exited and their exits are recorded.
func (s *Service) stopMonitor(ctx context.Context, podID string) error {
	m := s.existingMonitor(podID)
	m.stopping.Store(true)
	// Pause was normally stopped by the caller already: this only ends
	// one that a failed or interrupted RunPodSandbox left.
	_, err := m.client.Call(ctx, &monitor.Request{Op: monitor.OpSignal, ID: podID, Signal: int(unix.SIGKILL)})
	if errors.Is(err, monitor.ErrUnreachable) {
		return nil
	}
	// The monitor records pause's exit before it may go.
	_, err = m.client.Call(ctx, &monitor.Request{Op: monitor.OpWait, ID: podID})
	if err != nil && !monitor.IsCode(err, monitor.CodeNotFound) && !errors.Is(err, monitor.ErrUnreachable) {
		return fmt.Errorf("pod %s: wait for pause's exit: %w", podID, err)
	}
	_, err = m.client.Call(ctx, &monitor.Request{Op: monitor.OpShutdown})
	// A container whose create had found the pod still ready runs on
	// after the pod's containers were stopped: it is stopped too, and the
	// monitor asked again.
	for try := 1; monitor.IsCode(err, monitor.CodeBusy) && try < shutdownTries; try++ {
		if serr := s.StopPodContainers(ctx, podID); serr != nil {
			return fmt.Errorf("pod %s: stop monitor: %w (stopping a container made meanwhile: %v)", podID, err, serr)
		}
		_, err = m.client.Call(ctx, &monitor.Request{Op: monitor.OpShutdown})
	}
	if err != nil && !errors.Is(err, monitor.ErrUnreachable) {
		return fmt.Errorf("pod %s: stop monitor: %w", podID, err)
	}
	if m.gone != nil {
		select {
		case <-m.gone:
		case <-ctx.Done():
			return fmt.Errorf("pod %s: wait for the monitor to exit: %w", podID, ctx.Err())
		}
	}
	return nil
}
