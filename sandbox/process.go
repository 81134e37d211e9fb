package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/internal/errdefs"
	"github.com/berth-runtime/berth/internal/procstate"
)

// ErrProcessGone is returned when the process a record names has exited,
// or its pid now belongs to another process.
var ErrProcessGone = errors.New("process gone")

// Process is a handle on a running process by pidfd: signals cannot hit a
// recycled pid, and its exit is seen through the netpoller (no thread
// blocked per pod, no polling loop), whether or not berth is its parent.
type Process struct {
	pid       int
	startTime uint64
	file      *os.File // the pidfd
	done      chan struct{}
	// reap, when berth is the parent, collects the exit status so the
	// process does not stay a zombie.
	reap   func()
	exited atomic.Bool
	once   sync.Once
}

// OpenProcess adopts pid, provided it still is the process that started
// at startTime (clock ticks since boot, /proc/<pid>/stat field 22).
func OpenProcess(pid int, startTime uint64, reap func()) (*Process, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// Checked after the pidfd exists: from here on the pid cannot be
	// reused, so a match means the pidfd is the right process.
	st := procstate.StartTime(pid)
	if st == 0 || (startTime != 0 && st != startTime) {
		unix.Close(fd)
		return nil, fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
	}
	// A zombie nobody reaped yet is as gone as a reaped process.
	if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0); n > 0 && reap == nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
	}
	p := &Process{pid: pid, startTime: st, file: os.NewFile(uintptr(fd), "pidfd"), done: make(chan struct{}), reap: reap}
	go p.wait()
	return p, nil
}

func (p *Process) wait() {
	defer close(p.done)
	rc, err := p.file.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd polls readable once the process exited; the check makes a
	// spurious wakeup harmless.
	err = rc.Read(func(fd uintptr) bool {
		n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0
	})
	if err != nil {
		return // closed while still running
	}
	p.exited.Store(true)
	if p.reap != nil {
		p.reap()
	}
}

// Done is closed when the process has exited (or the handle was closed).
func (p *Process) Done() <-chan struct{} { return p.done }

// Pid is the process id.
func (p *Process) Pid() int { return p.pid }

// StartTime identifies the process together with its pid.
func (p *Process) StartTime() uint64 { return p.startTime }

// Exited reports whether the process has exited (as opposed to the
// handle having been closed).
func (p *Process) Exited() bool { return p.exited.Load() }

func (p *Process) signal(sig unix.Signal) error {
	err := unix.PidfdSendSignal(int(p.file.Fd()), sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// Stop sends SIGTERM, waits up to grace for the exit, then SIGKILLs and
// waits again. It never sleeps: it waits on the exit notification.
func (p *Process) Stop(ctx context.Context, grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if grace > 0 {
		if err := p.signal(unix.SIGTERM); err != nil {
			return fmt.Errorf("signal pid %d: %w", p.pid, err)
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
			return nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	if err := p.signal(unix.SIGKILL); err != nil {
		return fmt.Errorf("kill pid %d: %w", p.pid, err)
	}
	// A killed init of a PID namespace ends once every member has: one
	// in uninterruptible sleep (a read from a FUSE server that does not
	// answer) holds it. The caller learns which, and where it waits.
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("pid %d: %w: still running %s after SIGKILL: %s", p.pid, ErrStuck, killWait, p.stuck())
	case <-ctx.Done():
		return fmt.Errorf("wait for pid %d: %w: %s", p.pid, ctx.Err(), p.stuck())
	}
}

// killWait is how long a SIGKILLed process may take to end.
const killWait = 5 * time.Second

// ErrStuck is a process that does not end after SIGKILL.
var ErrStuck = errdefs.New("process stuck", errdefs.ErrDeadlineExceeded)

// stuck describes the process and what is left in its PID namespace.
func (p *Process) stuck() string {
	out := procstate.Describe(p.pid)
	if others := procstate.SamePIDNamespace(p.pid); len(others) > 0 {
		out += fmt.Sprintf("; %d more in its PID namespace: %s", len(others), procstate.DescribeAll(others, 8))
	}
	return out
}

// Close releases the pidfd; Done is closed.
func (p *Process) Close() {
	p.once.Do(func() { p.file.Close() })
}
