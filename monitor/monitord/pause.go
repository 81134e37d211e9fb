package monitord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
)

// pauseStartTimeout bounds how long pause may take to report ready.
const pauseStartTimeout = 30 * time.Second

// pauseProc is the pod's built-in pause, a child of the monitor. It is
// addressed by the pod's id.
type pauseProc struct {
	pid   int
	cmd   *exec.Cmd
	pidfd *os.File // PIDFD_NONBLOCK: its exit is seen through the netpoller
	dir   string
	// exited is done once exit is set and recorded.
	exited     context.Context
	markExited context.CancelFunc
	exit       *monitor.Exit
}

// runPause starts the built-in pause: a clone into new IPC/UTS/PID
// namespaces made from a thread that entered the pod's network namespace,
// so that pause is born in it. It returns once pause is in the pod cgroup
// and reported ready.
func (s *Server) runPause(r *monitor.PauseRequest) *monitor.Response {
	if r == nil || len(r.Args) == 0 || r.Dir == "" {
		return fail(monitor.CodeInvalid, errors.New("run-pause: missing args or dir"))
	}
	s.mu.Lock()
	switch {
	case s.shutdown:
		s.mu.Unlock()
		return fail(monitor.CodeInvalid, fmt.Errorf("pod %s monitor is shutting down", s.pod))
	case s.pause != nil && s.pause.exited.Err() == nil:
		s.mu.Unlock()
		return fail(monitor.CodeInvalid, fmt.Errorf("pod %s: pause already runs (pid %d)", s.pod, s.pause.pid))
	}
	// Reserved while it starts, without holding the lock.
	p := &pauseProc{dir: r.Dir}
	p.exited, p.markExited = context.WithCancel(context.Background())
	s.pause = p
	s.mu.Unlock()
	if err := p.start(r, s); err != nil {
		s.mu.Lock()
		if s.pause == p {
			s.pause = nil
		}
		s.mu.Unlock()
		return fail(monitor.CodeInvalid, fmt.Errorf("pod %s: %w", s.pod, err))
	}
	// Waited for by p.wait, not by the orphan reaper.
	s.reap.Lock()
	s.known[p.pid] = true
	s.reap.Unlock()
	s.onExit(p.pidfd, func() { p.wait(s) })
	s.log.Info("pause started", "pid", p.pid)
	return &monitor.Response{Pid: p.pid}
}

func (p *pauseProc) start(r *monitor.PauseRequest, s *Server) error {
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return err
	}
	// A pause from an earlier start of this pod must not be mistaken
	// for this one's exit.
	os.Remove(filepath.Join(r.Dir, monitor.ExitFile))
	if r.UserNS != nil && r.NetNS != "" {
		return errors.New("a pause in a user namespace makes its own network namespace: no netns to join")
	}
	cmd := exec.Command(r.Args[0], r.Args[1:]...)
	cmd.Env = r.Env
	launch := monitor.PauseLaunch{
		Cmd:     cmd,
		NetNS:   r.NetNS,
		NewIPC:  r.NewIPC,
		NewUTS:  r.NewUTS,
		NewPID:  r.NewPID,
		Timeout: pauseStartTimeout,
	}
	if r.Cgroup != "" {
		launch.Attach = func(pid int) error { return s.joinCgroup(r, pid) }
	}
	if r.UserNS != nil {
		launch.Prepare = monitor.PrepareUserNS(r.UserNS, !r.HostNetwork)
	}
	if err := launch.Start(); err != nil {
		return err
	}
	p.pid = cmd.Process.Pid
	// Pause is our unreaped child: its pid cannot have been reused.
	fd, err := unix.PidfdOpen(p.pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("pause pidfd: %w", err)
	}
	p.pidfd = os.NewFile(uintptr(fd), "pidfd")
	// Reaped by wait once the pidfd says it exited: no thread blocks in
	// wait4 meanwhile.
	p.cmd = cmd
	return nil
}

// wait records pause's exit the moment it happens.
func (p *pauseProc) wait(s *Server) {
	if err := waitPidfd(p.pidfd); err != nil {
		s.log.Warn("wait for pause", "error", err)
	}
	// The pidfd stays open: signals through it cannot hit a recycled pid.
	err := p.cmd.Wait()
	s.reap.Lock()
	delete(s.known, p.pid)
	s.reap.Unlock()
	s.pokeReaper()
	exit := pauseExitOf(p.cmd.ProcessState, err)
	if err := monitor.WriteExit(p.dir, exit); err != nil {
		s.log.Error("record pause exit", "error", err)
	}
	s.mu.Lock()
	p.exit = exit
	s.mu.Unlock()
	p.markExited()
	s.log.Info("pause exited", "pid", p.pid, "code", exit.Code, "signal", exit.Signal)
	settle()
}

// waitPidfd returns once the process behind a non-blocking pidfd has
// exited, parked in the netpoller rather than in a blocking syscall.
func waitPidfd(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	// A pidfd polls readable once the process exited; the check makes a
	// spurious wakeup harmless.
	return rc.Read(func(fd uintptr) bool { return readable(int(fd)) })
}

// pauseExitOf turns a wait result into an Exit.
func pauseExitOf(st *os.ProcessState, err error) *monitor.Exit {
	exit := &monitor.Exit{FinishedAt: time.Now()}
	if st == nil {
		exit.Code = -1
		if err != nil {
			exit.Message = "wait: " + err.Error()
		}
		return exit
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		exit.Signal = int(ws.Signal())
		exit.Code = 128 + exit.Signal
	} else {
		exit.Code = st.ExitCode()
	}
	return exit
}

// pauseCall answers the calls that address pause by the pod's id.
func (s *Server) pauseCall(p *pauseProc, req *monitor.Request) *monitor.Response {
	switch req.Op {
	case monitor.OpStatus:
		s.mu.Lock()
		defer s.mu.Unlock()
		if p.exit != nil {
			return &monitor.Response{Pid: p.pid, State: monitor.StateExited, Exit: p.exit}
		}
		return &monitor.Response{Pid: p.pid, State: monitor.StateRunning}
	case monitor.OpSignal:
		if p.exited.Err() != nil {
			return fail(monitor.CodeNotRunning, fmt.Errorf("pause of pod %s: %w", s.pod, errNotRunning))
		}
		if err := pidfdSignal(p.pidfd, syscall.Signal(req.Signal)); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return fail(monitor.CodeNotRunning, fmt.Errorf("pause of pod %s: %w", s.pod, errNotRunning))
			}
			return fail("", fmt.Errorf("pause of pod %s: signal %d: %w", s.pod, req.Signal, err))
		}
		return &monitor.Response{}
	}
	return fail(monitor.CodeInvalid, fmt.Errorf("operation %q does not apply to pause", req.Op))
}

// pidfdSignal signals through a pidfd without Fd(), which would take the
// file out of the netpoller.
func pidfdSignal(f *os.File, sig syscall.Signal) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return err
	}
	return serr
}
