package monitord

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
)

// child is a process the monitor inherited from the spawn helper: a
// container's init or an exec. Its pidfd, opened while the helper still
// held it unreaped, cannot name another process.
type child struct {
	pid   int
	pidfd *os.File // PIDFD_NONBLOCK: its exit is seen through the netpoller
}

// wait returns once the process has exited, and reaps it. It is the
// monitor's child by then: the helper has exited before any wait starts.
func (ch *child) wait() (unix.WaitStatus, error) {
	if err := waitPidfd(ch.pidfd); err != nil {
		return 0, err
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(ch.pid, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		return ws, err
	}
}

func (ch *child) signal(sig syscall.Signal) error { return pidfdSignal(ch.pidfd, sig) }

// exitOf turns a wait status into an Exit.
func exitOf(ws unix.WaitStatus, err error) *monitor.Exit {
	e := &monitor.Exit{FinishedAt: time.Now()}
	switch {
	case err != nil:
		e.Code, e.Message = -1, "wait: "+err.Error()
	case ws.Signaled():
		e.Signal = int(ws.Signal())
		e.Code = 128 + e.Signal
	default:
		e.Code = ws.ExitStatus()
	}
	return e
}

// spawnTimeout bounds one helper run: a create that libcontainer cannot
// finish must not hold the container's id for good.
const spawnTimeout = 2 * time.Minute

// spawn runs the helper for r, handing it files as the process's stdio.
// A create or exec returns the process, held by the monitor from then on;
// other operations return a nil child. files are the caller's to close.
func (s *Server) spawn(r *monitor.SpawnRequest, files ...*os.File) (*child, *monitor.SpawnResult, error) {
	r.Root, r.Systemd = s.root, s.systemd
	data, err := json.Marshal(r)
	if err != nil {
		return nil, nil, err
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer resR.Close()
	ackR, ackW, err := os.Pipe()
	if err != nil {
		resW.Close()
		return nil, nil, err
	}
	defer ackW.Close()
	cmd := exec.Command(s.helper)
	cmd.Stdin = bytes.NewReader(data)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = append([]*os.File{resW, ackR}, files...)
	cmd.Dir = "/"
	cmd.Env = s.helperEnv
	s.reap.Lock()
	err = cmd.Start()
	if err == nil {
		s.known[cmd.Process.Pid] = true
	}
	s.reap.Unlock()
	resW.Close()
	ackR.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("run %s: %w", s.helper, err)
	}
	defer func() {
		s.reap.Lock()
		delete(s.known, cmd.Process.Pid)
		s.reap.Unlock()
		s.pokeReaper()
	}()
	timer := time.AfterFunc(spawnTimeout, func() { cmd.Process.Kill() })
	defer timer.Stop()
	// The helper is waited for through a pidfd in the netpoller: a wait4
	// blocked for its whole run would take an OS thread, which the
	// monitor then keeps for good.
	wait := func() error {
		if fd, err := unix.PidfdOpen(cmd.Process.Pid, unix.PIDFD_NONBLOCK); err == nil {
			f := os.NewFile(uintptr(fd), "pidfd")
			waitPidfd(f)
			f.Close()
		}
		return cmd.Wait()
	}
	out, _ := io.ReadAll(io.LimitReader(resR, 1<<20))
	res := &monitor.SpawnResult{}
	if err := json.Unmarshal(out, res); err != nil || (res.Error == "" && (r.Op == monitor.SpawnCreate || r.Op == monitor.SpawnExec) && res.Pid <= 0) {
		// A helper that died midway may leave processes of its own.
		s.expectOrphans()
		ackW.Close()
		werr := wait()
		return nil, nil, fmt.Errorf("container %s: %s %s: the helper ended without an answer (%v)", r.ID, s.helper, r.Op, werr)
	}
	if res.Error != "" {
		ackW.Close()
		if wait() != nil {
			s.expectOrphans()
		}
		return nil, nil, errors.New(res.Error)
	}
	var ch *child
	if res.Pid > 0 {
		fd, err := unix.PidfdOpen(res.Pid, unix.PIDFD_NONBLOCK)
		if err != nil {
			// Gone already is still the helper's unreaped child: after
			// the helper it is ours, and reaped by the orphan reaper.
			ackW.Close()
			wait()
			return nil, nil, fmt.Errorf("container %s: pidfd of %d: %w", r.ID, res.Pid, err)
		}
		ch = &child{pid: res.Pid, pidfd: os.NewFile(uintptr(fd), "pidfd")}
		s.reap.Lock()
		s.known[res.Pid] = true
		s.reap.Unlock()
	}
	ackW.Close()
	if err := wait(); err != nil {
		s.expectOrphans()
		if ch != nil {
			// Killed after its answer: the process runs all the same, and
			// is ours now.
			s.log.Warn("spawn helper failed after its answer", "container", r.ID, "op", r.Op, "error", err)
		}
	}
	return ch, res, nil
}

// forget ends the monitor's hold on a reaped child.
func (s *Server) forget(ch *child) {
	s.reaped(ch)
	ch.pidfd.Close()
}

// reaped tells the orphan reaper that a known child has been reaped. Its
// pidfd may stay open: a signal through it then fails with ESRCH, never
// hits another process.
func (s *Server) reaped(ch *child) {
	s.reap.Lock()
	delete(s.known, ch.pid)
	s.reap.Unlock()
	s.pokeReaper()
}

// reapOrphans reaps the processes that end up the monitor's children as
// it is a subreaper, and that it does not wait for itself: those a
// container sharing the host's PID namespace leaves behind, and those of
// a helper that died before it was done. It looks at the first exited
// child without reaping it, reaps it if it is nobody's, and goes on; a
// known one is left to its waiter, which pokes the reaper again once it
// has reaped it. It looks when poked: after each helper run and each
// reaped child, and at every SIGCHLD once expectOrphans has been called.
func (s *Server) reapOrphans() {
	for range s.poke {
		s.reap.Lock()
		for {
			pid := exitedChild()
			if pid <= 0 || s.known[pid] {
				break
			}
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
		s.reap.Unlock()
	}
}

// expectOrphans has the orphan reaper look at every SIGCHLD from now on:
// a child the monitor does not know can exit at any time. Until then the
// monitor's own events are enough, and it spares the OS thread that
// os/signal's receiver takes (~28 kB of each pod's monitor).
func (s *Server) expectOrphans() {
	s.sigchld.Do(func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGCHLD)
		go func() {
			for range sigs {
				s.pokeReaper()
			}
		}()
		s.pokeReaper() // for an orphan that exited before the watch
	})
}

// pokeReaper has the orphan reaper look again: a known child it stopped
// at has been reaped.
func (s *Server) pokeReaper() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// exitedChild is the pid of an exited, unreaped child, 0 if none.
func exitedChild() int {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0
		}
		break
	}
	// si_pid follows si_signo, si_errno, si_code, at the union's
	// pointer-aligned offset.
	off := unsafe.Sizeof(uintptr(0)) * 2
	if unsafe.Sizeof(uintptr(0)) == 4 {
		off = 12
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), off)))
}

// releaseInit lets a created container's process run: libcontainer's
// init waits, blocked opening its exec fifo for writing, until the fifo
// is opened for reading, and is then read its one byte. The fifo is
// opened without blocking and read in the netpoller (a blocked open would
// take an OS thread, which the monitor then keeps). exited is closed if
// the process dies meanwhile.
func releaseInit(fifo string, exited <-chan struct{}) error {
	f, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("exec fifo: %w", err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() {
		data, err := readFifo(f)
		switch {
		case err != nil:
		case len(data) == 0:
			err = errors.New("cannot start an already running container")
		default:
			if rerr := os.Remove(fifo); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = rerr
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-exited:
		f.SetReadDeadline(time.Now())
		<-done
		return errNotRunning
	}
}

// readFifo reads a fifo opened without blocking until its writer has
// written and closed it. A read finds no writer (0 bytes) before the
// writer opens it too; poll tells that from the end only once a writer
// was there (POLLHUP).
func readFifo(f *os.File) ([]byte, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var data []byte
	buf := make([]byte, 64)
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			if rerr == unix.EAGAIN {
				return false
			}
			if rerr == nil && n == 0 {
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				if k, _ := unix.Poll(pfd, 0); k <= 0 || pfd[0].Revents&unix.POLLHUP == 0 {
					return false // no writer yet
				}
			}
			return true
		})
		switch {
		case err != nil:
			return data, err
		case rerr == unix.EINTR:
		case rerr != nil:
			return data, rerr
		case n == 0:
			return data, nil
		default:
			data = append(data, buf[:n]...)
		}
	}
}

// recvFile receives one descriptor sent over a unix socket (the
// terminal's master, from the container's init).
func recvFile(sock *os.File) (*os.File, error) {
	buf := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4))
	rc, err := sock.SyscallConn()
	if err != nil {
		return nil, err
	}
	var n, oobn int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("receive terminal: %d control messages (%v)", len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("receive terminal: %d descriptors (%v)", len(fds), err)
	}
	return os.NewFile(uintptr(fds[0]), string(buf[:n])), nil
}

// socketPair is a connected pair of unix stream sockets, close-on-exec.
func socketPair(name string) (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair %s: %w", name, err)
	}
	return os.NewFile(uintptr(fds[1]), name+"-p"), os.NewFile(uintptr(fds[0]), name+"-c"), nil
}
