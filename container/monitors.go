package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/podproc"
)

// podMonitor is berth's handle on one pod's monitor process. The monitor
// is started with the pod (StartPause) and lives until the pod stops.
type podMonitor struct {
	client podClient
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

// kindFile, in a pod's monitor dir, names the kind of its own process
// (PodProcessC); a pod without one has the Go monitor, as every pod made
// before the file was written has. Berth meets both after an upgrade, and
// talks to each in its own protocol until the pod ends.
const kindFile = "kind"

func (s *Service) newMonitor(podID string) *podMonitor {
	paths := monitor.PathsFor(s.opts.State, podID)
	kind, _ := os.ReadFile(filepath.Join(paths.Dir, kindFile))
	return s.monitorOf(paths, strings.TrimSpace(string(kind)))
}

func (s *Service) monitorOf(paths monitor.Paths, kind string) *podMonitor {
	if kind == PodProcessC {
		return &podMonitor{client: cClient{c: &podproc.Client{Socket: paths.Socket}, systemd: s.opts.CgroupDriver == cgroup.Systemd}, paths: paths}
	}
	return &podMonitor{client: jsonClient{&monitor.Client{Socket: paths.Socket}}, paths: paths}
}

// startMonitor starts the pod's own process, of the kind Options ask
// for, and watches it.
func (s *Service) startMonitor(ctx context.Context, podID string) (*podMonitor, error) {
	var m *podMonitor
	var proc *os.Process
	var err error
	if s.opts.PodProcess == PodProcessC {
		m, proc, err = s.startPodProc(ctx, podID)
	} else {
		var bin string
		if bin, err = s.monitorBinary(); err != nil {
			return nil, err
		}
		m = s.monitorOf(monitor.PathsFor(s.opts.State, podID), PodProcessMonitor)
		proc, err = monitor.Start(ctx, monitor.StartOptions{Binary: bin, PodID: podID, Paths: m.paths, RuncRoot: s.runc, CgroupDriver: string(s.opts.CgroupDriver)})
	}
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

// startPodProc starts the C pod process, berth-podproc, found next to
// berth-monitor with the spawn helper beside it, and records its kind
// first: a berth that dies right after the start knows which protocol
// its pod speaks.
func (s *Service) startPodProc(ctx context.Context, podID string) (*podMonitor, *os.Process, error) {
	mon, err := s.monitorBinary()
	if err != nil {
		return nil, nil, err
	}
	bin := filepath.Join(filepath.Dir(mon), podproc.BinaryName)
	if s.opts.PodProcBinary != "" {
		bin = s.opts.PodProcBinary
	}
	paths := monitor.PathsFor(s.opts.State, podID)
	if err := os.MkdirAll(paths.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("pod %s: monitor dir: %w", podID, err)
	}
	if err := os.WriteFile(filepath.Join(paths.Dir, kindFile), []byte(PodProcessC+"\n"), 0o600); err != nil {
		return nil, nil, fmt.Errorf("pod %s: %w", podID, err)
	}
	logf, err := os.OpenFile(paths.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("pod %s: monitor log: %w", podID, err)
	}
	defer logf.Close()
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	// The spawn helper's crash points, armed in berth's environment.
	if p := os.Getenv(faultpoint.EnvPoint); strings.HasPrefix(p, "spawn-") {
		for _, k := range []string{faultpoint.EnvPoint, faultpoint.EnvFile, faultpoint.EnvDelay} {
			if v, ok := os.LookupEnv(k); ok {
				env = append(env, k+"="+v)
			}
		}
	}
	proc, err := podproc.Start(ctx, podproc.StartOptions{Binary: bin, PodID: podID, Socket: paths.Socket, Log: logf,
		Spawn: filepath.Join(filepath.Dir(bin), monitor.SpawnBinary), Root: s.runc, Systemd: s.opts.CgroupDriver == cgroup.Systemd, Env: env})
	if err != nil {
		return nil, nil, err
	}
	return s.monitorOf(paths, PodProcessC), proc, nil
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
	err := m.client.Signal(ctx, podID, unix.SIGKILL)
	if errors.Is(err, monitor.ErrUnreachable) {
		return nil
	}
	// The monitor records pause's exit before it may go.
	_, err = m.client.Wait(ctx, podID)
	if err != nil && !monitor.IsCode(err, monitor.CodeNotFound) && !errors.Is(err, monitor.ErrUnreachable) {
		return fmt.Errorf("pod %s: wait for pause's exit: %w", podID, err)
	}
	err = m.client.Shutdown(ctx)
	// A container whose create had found the pod still ready runs on
	// after the pod's containers were stopped: it is stopped too, and the
	// monitor asked again.
	for try := 1; monitor.IsCode(err, monitor.CodeBusy) && try < shutdownTries; try++ {
		if serr := s.StopPodContainers(ctx, podID); serr != nil {
			return fmt.Errorf("pod %s: stop monitor: %w (stopping a container made meanwhile: %v)", podID, err, serr)
		}
		err = m.client.Shutdown(ctx)
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
