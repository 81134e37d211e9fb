package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/internal/cgprime"
	"github.com/berth-runtime/berth/monitor"
)

// drainTimeout bounds how long an exec waits for its output to reach EOF
// once the command has exited: a background child may hold the pipes.
const drainTimeout = 2 * time.Second

// TermSize is a terminal's size.
type TermSize struct{ Width, Height uint16 }

// Streams are the client's side of an interactive exec or an attach. A
// nil stream was not asked for.
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	Resize         <-chan TermSize
}

// Exec runs cmd in a running container with the client's streams and
// returns its exit code. The command is started by the pod's monitor,
// which hands its stdio to berth: the data never goes through the
// monitor. End of stdin closes the command's stdin (with a TTY it hangs
// the terminal up); a client that goes away (ctx, or a failed write) has
// the command killed.
func (s *Service) Exec(ctx context.Context, id string, cmd []string, st Streams) (int, error) {
	if len(cmd) == 0 {
		return 0, fmt.Errorf("%w: cmd: empty", ErrInvalid)
	}
	c, err := s.lookup(id)
	if err != nil {
		return 0, err
	}
	rec := c.snapshot()
	if rec.State != StateRunning || c.isExited() {
		return 0, fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
	}
	cgprime.Prime() // as ExecSync does
	req := &monitor.StreamRequest{Args: cmd, TTY: st.TTY, Stdin: st.Stdin != nil, Stdout: st.Stdout != nil, Stderr: st.Stderr != nil && !st.TTY}
	if st.TTY {
		// Wait briefly for the client's size, so that the command starts
		// with the right one (a shell reads it once, at start).
		select {
		case sz, ok := <-st.Resize:
			if ok {
				req.Width, req.Height = sz.Width, sz.Height
			}
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	sess, err := s.podProc(rec.PodID).ExecStream(ctx, rec.ID, req)
	if err != nil {
		if monitor.IsCode(err, monitor.CodeNotRunning) {
			return 0, fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
		}
		return 0, fmt.Errorf("container %s: exec %q: %w", rec.ID, cmd[0], err)
	}
	defer sess.Close()
	files := sess.Files()
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()

	// gone is closed when the client is gone: the command is then killed.
	gone := make(chan struct{})
	var goneOnce sync.Once
	clientGone := func() { goneOnce.Do(func() { close(gone) }) }
	var copies sync.WaitGroup
	copyOut := func(w io.Writer, r *os.File) {
		copies.Add(1)
		go func() {
			defer copies.Done()
			if _, err := io.Copy(w, r); err != nil && !isTerminalEOF(err) && !errors.Is(err, os.ErrClosed) {
				clientGone()
			}
		}()
	}
	if st.TTY {
		master := pollable(files[0])
		files[0] = master
		if st.Stdout != nil {
			copyOut(st.Stdout, master)
		}
		if st.Stdin != nil {
			go func() {
				io.Copy(master, st.Stdin)
				// A terminal has no half-close: end of input hangs it up.
				master.Close()
			}()
		}
		go forwardResizes(st.Resize, gone, func(sz TermSize) bool {
			setWinsize(master, sz)
			return true
		})
	} else {
		i := 0
		if st.Stdin != nil {
			w := files[i]
			i++
			go func() {
				io.Copy(w, st.Stdin)
				w.Close()
			}()
		}
		for _, out := range []io.Writer{st.Stdout, st.Stderr} {
			if out != nil {
				copyOut(out, files[i])
				i++
			}
		}
	}

	type result struct {
		exit *monitor.Exit
		err  error
	}
	waited := make(chan result, 1)
	waitCtx, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWait()
	go func() {
		e, err := sess.Wait(waitCtx)
		waited <- result{e, err}
	}()
	var res result
	select {
	case res = <-waited:
	case <-ctx.Done():
		return 0, fmt.Errorf("container %s: exec %q: %w", rec.ID, cmd[0], ctx.Err())
	case <-gone:
		return 0, fmt.Errorf("container %s: exec %q: the client went away", rec.ID, cmd[0])
	}
	if res.err != nil {
		return 0, fmt.Errorf("container %s: exec %q: %w", rec.ID, cmd[0], res.err)
	}
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
	}
	return res.exit.Code, nil
}

// isTerminalEOF: a terminal's master reads EIO once the other side is
// closed, its way of saying EOF.
func isTerminalEOF(err error) bool { return errors.Is(err, unix.EIO) }

// Attach joins a running container's own stdin, stdout and stderr until
// it exits or the client goes away. Output is the container's from now
// on; its log gets it all the same. End of the client's stdin closes the
// container's stdin if it was created with stdin_once.
func (s *Service) Attach(ctx context.Context, id string, st Streams) error {
	c, err := s.lookup(id)
	if err != nil {
		return err
	}
	rec := c.snapshot()
	if c.isExited() {
		return fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
	}
	if !c.cfg.GetStdin() {
		st.Stdin = nil
	}
	tty := c.cfg.GetTty()
	req := &monitor.StreamRequest{Stdin: st.Stdin != nil, Stdout: st.Stdout != nil, Stderr: st.Stderr != nil && !tty, TTY: tty}
	sess, err := s.podProc(rec.PodID).Attach(ctx, rec.ID, req)
	if err != nil {
		if monitor.IsCode(err, monitor.CodeNotRunning) {
			return fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
		}
		return fmt.Errorf("container %s: attach: %w", rec.ID, err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	done := make(chan struct{})
	defer close(done)
	if st.Stdin != nil {
		go func() {
			buf := make([]byte, 32*1024)
			for {
				n, err := st.Stdin.Read(buf)
				if n > 0 && sess.WriteStdin(buf[:n]) != nil {
					return
				}
				if err != nil {
					sess.CloseStdin()
					return
				}
			}
		}()
	}
	if tty && st.Resize != nil {
		go forwardResizes(st.Resize, done, func(sz TermSize) bool {
			return sess.Resize(sz.Width, sz.Height) == nil
		})
	}
	for {
		kind, payload, exit, err := sess.Read()
		if err != nil {
			if ctx.Err() != nil {
				return nil // the client detached
			}
			return fmt.Errorf("container %s: attach: %w", rec.ID, err)
		}
		var w io.Writer
		switch kind {
		case monitor.FrameStdout:
			w = st.Stdout
		case monitor.FrameStderr:
			w = st.Stderr
		case monitor.FrameExit:
			s.log.Debug("attached container exited", "container", rec.ID, "code", exit.Code)
			return nil
		}
		if w != nil {
			if _, err := w.Write(payload); err != nil {
				return nil // the client went away: detach
			}
		}
	}
}

// forwardResizes hands each of the client's terminal sizes to apply
// until the client has no more, stop is closed or apply returns false.
func forwardResizes(resize <-chan TermSize, stop <-chan struct{}, apply func(TermSize) bool) {
	for {
		select {
		case sz, ok := <-resize:
			if !ok || !apply(sz) {
				return
			}
		case <-stop:
			return
		}
	}
}

// pollable returns f made non-blocking and registered with Go's poller,
// so that closing it interrupts a pending read.
func pollable(f *os.File) *os.File {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return f
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return f
	}
	f.Close()
	return os.NewFile(uintptr(fd), "pty")
}

// setWinsize resizes a terminal through its master. SyscallConn, not Fd:
// Fd would make the file blocking again.
func setWinsize(f *os.File, sz TermSize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: sz.Width, Row: sz.Height})
	}); err != nil {
		return err
	}
	return ioctlErr
}
