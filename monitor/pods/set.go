package pods

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/procstate"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/podproc"
)

// ErrPauseGone is returned by Adopt when the pod's pause is not running
// under its process any more.
var ErrPauseGone = errors.New("pause is gone")

// Options configure a Set.
type Options struct {
	// State is berth's volatile root: a pod's process keeps its socket,
	// log and kind under State/monitors (monitor.PathsFor).
	State string
	// RuncRoot is libcontainer's state root (the spawn helper's).
	RuncRoot     string
	CgroupDriver cgroup.Driver
	// Kind is the process new pods get: KindC (berth's default,
	// internal/config) or KindMonitor (empty). A pod keeps the kind it
	// was made with.
	Kind string
	// MonitorBinary is berth-monitor (empty: next to berth);
	// PodProcBinary is berth-podproc (empty: next to berth-monitor).
	MonitorBinary, PodProcBinary string
	Logger                       *slog.Logger
}

// Set is the pods' own processes: one per pod, started with the pod,
// adopted after a restart of berth, stopped with the pod. Each is watched
// by pidfd: one that exits unasked ends its pod's pause, so that the pod
// is seen not ready.
type Set struct {
	opts Options
	log  *slog.Logger
	ctx  context.Context // ends with Close: stops the watchers
	stop context.CancelFunc

	mu    sync.Mutex
	procs map[string]*proc
	// silent are the pods whose process did not answer their adoption:
	// the containers' recovery, next, does not wait for it again.
	silent map[string]bool
}

// proc is one pod's process.
type proc struct {
	client Client
	paths  monitor.Paths
	// stopping is set once the pod is being stopped: the exit is then
	// expected.
	stopping atomic.Bool
	// gone is closed once the process has exited; nil while nothing
	// watches it.
	gone chan struct{}

	mu sync.Mutex
	// The pod's pause (built in or infra container), killed if the
	// process dies: no one would record its exit any more.
	pausePid   int
	pauseStart uint64
}

// New makes an empty Set.
func New(o Options) *Set {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Set{opts: o, log: o.Logger.With("component", "pods"), procs: map[string]*proc{}, silent: map[string]bool{}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	return s
}

// Close stops watching the processes; they keep running.
func (s *Set) Close() { s.stop() }

// kindFile, in a pod's monitor dir, names the kind of its own process
// (KindC); a pod without one has the Go monitor, as every pod made before
// the file was written has. Berth meets both after an upgrade, and talks
// to each in its own protocol until the pod ends.
const kindFile = "kind"

func (s *Set) open(podID string) *proc {
	paths := monitor.PathsFor(s.opts.State, podID)
	kind, _ := os.ReadFile(filepath.Join(paths.Dir, kindFile))
	return s.of(paths, strings.TrimSpace(string(kind)))
}

func (s *Set) of(paths monitor.Paths, kind string) *proc {
	if kind == KindC {
		return &proc{client: cClient{c: &podproc.Client{Socket: paths.Socket}, systemd: s.opts.CgroupDriver == cgroup.Systemd}, paths: paths}
	}
	return &proc{client: jsonClient{&monitor.Client{Socket: paths.Socket}}, paths: paths}
}

// get returns the pod's process, known or not: calls through one that is
// gone fail with monitor.ErrUnreachable.
func (s *Set) get(podID string) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.procs[podID]; ok {
		return p
	}
	p := s.open(podID)
	s.procs[podID] = p
	return p
}

// Client is the pod's process's client.
func (s *Set) Client(podID string) Client { return s.get(podID).client }

// CanRestore tells whether the pod's process can restore a checkpoint:
// the C pod process can, the Go monitor cannot.
func (s *Set) CanRestore(podID string) bool {
	_, ok := s.get(podID).client.(cClient)
	return ok
}

// Silent tells whether the pod's process did not answer its adoption.
func (s *Set) Silent(podID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.silent[podID]
}

func (s *Set) monitorBinary() (string, error) {
	if s.opts.MonitorBinary != "" {
		return s.opts.MonitorBinary, nil
	}
	return monitor.FindBinary()
}

// SpawnBinary is the spawn helper, next to the monitor (where startC
// finds it too), for the libcontainer calls berth makes itself.
func (s *Set) SpawnBinary() (string, error) {
	mon, err := s.monitorBinary()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(mon), monitor.SpawnBinary), nil
}

// Start starts the pod's own process, of the kind Options ask for, and
// watches it.
func (s *Set) Start(ctx context.Context, podID string) (Client, error) {
	var p *proc
	var osp *os.Process
	var err error
	if s.opts.Kind == KindC {
		p, osp, err = s.startC(ctx, podID)
	} else {
		var bin string
		if bin, err = s.monitorBinary(); err != nil {
			return nil, err
		}
		p = s.of(monitor.PathsFor(s.opts.State, podID), KindMonitor)
		osp, err = monitor.Start(ctx, monitor.StartOptions{Binary: bin, PodID: podID, Paths: p.paths, RuncRoot: s.opts.RuncRoot, CgroupDriver: string(s.opts.CgroupDriver)})
	}
	if err != nil {
		return nil, err
	}
	if err := s.watch(podID, p, osp.Pid, osp); err != nil {
		osp.Kill()
		osp.Wait()
		return nil, fmt.Errorf("pod %s: %w", podID, err)
	}
	s.mu.Lock()
	s.procs[podID] = p
	s.mu.Unlock()
	return p.client, nil
}

// startC starts the C pod process, berth-podproc, found next to
// berth-monitor with the spawn helper beside it, and records its kind
// first: a berth that dies right after the start knows which protocol
// its pod speaks.
func (s *Set) startC(ctx context.Context, podID string) (*proc, *os.Process, error) {
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
	if err := os.WriteFile(filepath.Join(paths.Dir, kindFile), []byte(KindC+"\n"), 0o600); err != nil {
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
	osp, err := podproc.Start(ctx, podproc.StartOptions{Binary: bin, PodID: podID, Socket: paths.Socket, Log: logf,
		Spawn: filepath.Join(filepath.Dir(bin), monitor.SpawnBinary), Root: s.opts.RuncRoot, Systemd: s.opts.CgroupDriver == cgroup.Systemd, Env: env})
	if err != nil {
		return nil, nil, err
	}
	return s.of(paths, KindC), osp, nil
}

// RunPause has the pod's process start the built-in pause as its child
// (r.Dir is filled in: the process's own dir) and returns pause's pid.
func (s *Set) RunPause(ctx context.Context, podID string, r *monitor.PauseRequest) (int, error) {
	p := s.get(podID)
	r.Dir = p.paths.Dir
	pid, err := p.client.RunPause(ctx, podID, r)
	if err != nil {
		return 0, err
	}
	s.PauseStarted(podID, pid)
	return pid, nil
}

// PauseStarted records the pod's pause (the infra container's process
// where the pod runs pause from an image), killed should the pod's
// process die.
func (s *Set) PauseStarted(podID string, pid int) {
	p := s.get(podID)
	p.mu.Lock()
	p.pausePid, p.pauseStart = pid, procstate.StartTime(pid)
	p.mu.Unlock()
}

// Adopt reattaches, after a berth restart, to a pod's process and its
// pause. The process must still run and report pause, with the pid and
// start time berth recorded, as running; otherwise a pause left without
// its process is killed (no one would record its exit) and the error
// wraps ErrPauseGone. A process that does not answer within ctx is
// marked silent, and its pause kept.
func (s *Set) Adopt(ctx context.Context, podID string, pid int, start uint64) error {
	p := s.open(podID)
	gone := func(why string) error {
		if pid > 0 && procstate.StartTime(pid) == start {
			s.log.Warn("killing pause left without its pod's process", "pod", podID, "pid", pid)
			procstate.Kill(pid)
		}
		return fmt.Errorf("pod %s: %w: %s", podID, ErrPauseGone, why)
	}
	pingPid, err := p.client.Ping(ctx)
	if ctx.Err() != nil {
		// Alive but not answering (stopped, wedged): not a reason to
		// kill its pause.
		s.mu.Lock()
		s.silent[podID] = true
		s.mu.Unlock()
		return fmt.Errorf("pod %s: its monitor does not answer: %w", podID, ctx.Err())
	}
	if errors.Is(err, monitor.ErrVersion) {
		// Alive, and pause with it, in a protocol this berth does not
		// speak: kept, not killed.
		return fmt.Errorf("pod %s: %w", podID, err)
	}
	if err != nil {
		return gone("its monitor is gone")
	}
	st, err := p.client.Status(ctx, podID)
	switch {
	case err != nil && !errors.Is(err, monitor.ErrUnreachable) && !monitor.IsCode(err, monitor.CodeNotFound):
		return fmt.Errorf("pod %s: pause status: %w", podID, err)
	case err != nil:
		return gone("its monitor does not know it")
	case st.State != monitor.StateRunning || st.Pid != pid || procstate.StartTime(pid) != start:
		return fmt.Errorf("pod %s: %w: exited", podID, ErrPauseGone)
	}
	if err := s.watch(podID, p, pingPid, nil); err != nil {
		return err
	}
	p.pausePid, p.pauseStart = pid, start
	s.mu.Lock()
	s.procs[podID] = p
	s.mu.Unlock()
	return nil
}

// watch notices the process's exit through a pidfd (no thread blocked,
// no polling). An exit nobody asked for ends the pod's pause, so that the
// pod is seen not ready; its containers see the process gone through
// their own watchers. osp, when berth started the process, is reaped.
func (s *Set) watch(podID string, p *proc, pid int, osp *os.Process) error {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("watch monitor %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	p.gone = make(chan struct{})
	stop := context.AfterFunc(s.ctx, func() { f.Close() })
	go func() {
		err := waitPidfd(f)
		stop()
		f.Close()
		if err != nil {
			return // berth is closing
		}
		if osp != nil {
			osp.Wait()
		}
		close(p.gone)
		if p.stopping.Load() {
			return
		}
		p.mu.Lock()
		pid, start := p.pausePid, p.pauseStart
		p.mu.Unlock()
		s.log.Warn("pod monitor exited: ending the pod's pause", "pod", podID, "pause", pid)
		if pid > 0 && procstate.StartTime(pid) == start {
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

// shutdownTries bounds how often a pod's stop asks its process to exit
// while something made during the stop keeps it, shutdownBackoff times
// the try apart (0.1 s, 0.2 s, ...: 1 s in all).
const (
	shutdownTries   = 5
	shutdownBackoff = 100 * time.Millisecond
)

// Stop lets the pod's process exit once pause and every container have
// exited and their exits are recorded. stopContainers stops a container
// whose create had found the pod still ready, made during the stop.
// Stopping a pod without a process succeeds.
func (s *Set) Stop(ctx context.Context, podID string, stopContainers func(context.Context) error) error {
	p := s.get(podID)
	p.stopping.Store(true)
	// Pause was normally stopped by the caller already: this only ends
	// one that a failed or interrupted RunPodSandbox left.
	err := p.client.Signal(ctx, podID, syscall.SIGKILL)
	if errors.Is(err, monitor.ErrUnreachable) {
		return nil
	}
	// The process records pause's exit before it may go.
	_, err = p.client.Wait(ctx, podID)
	if err != nil && !monitor.IsCode(err, monitor.CodeNotFound) && !errors.Is(err, monitor.ErrUnreachable) {
		return fmt.Errorf("pod %s: wait for pause's exit: %w", podID, err)
	}
	err = p.client.Shutdown(ctx)
	for try := 1; monitor.IsCode(err, monitor.CodeBusy) && try < shutdownTries; try++ {
		if serr := stopContainers(ctx); serr != nil {
			return fmt.Errorf("pod %s: stop monitor: %w (stopping a container made meanwhile: %v)", podID, err, serr)
		}
		// What keeps it may also be the pod's infra container, whose
		// create a crashed berth left running in the pod's process (its
		// kill above came before it existed), or the destroy after a
		// create that failed, which ends by itself: both get a moment.
		select {
		case <-time.After(time.Duration(try) * shutdownBackoff):
		case <-ctx.Done():
			return fmt.Errorf("pod %s: stop monitor: %w", podID, ctx.Err())
		}
		p.client.Signal(ctx, podID, syscall.SIGKILL)
		err = p.client.Shutdown(ctx)
	}
	if err != nil && !errors.Is(err, monitor.ErrUnreachable) {
		return fmt.Errorf("pod %s: stop monitor: %w", podID, err)
	}
	if p.gone != nil {
		select {
		case <-p.gone:
		case <-ctx.Done():
			return fmt.Errorf("pod %s: wait for the monitor to exit: %w", podID, ctx.Err())
		}
	}
	return nil
}

// Remove forgets a stopped pod's process: its socket and directory.
func (s *Set) Remove(podID string) error {
	s.mu.Lock()
	p := s.procs[podID]
	delete(s.procs, podID)
	delete(s.silent, podID)
	s.mu.Unlock()
	paths := monitor.PathsFor(s.opts.State, podID)
	if p != nil {
		paths = p.paths
	}
	if err := os.Remove(paths.Socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("pod %s: remove monitor socket: %w", podID, err)
	}
	if err := os.RemoveAll(paths.Dir); err != nil {
		return fmt.Errorf("pod %s: remove monitor dir: %w", podID, err)
	}
	return nil
}
