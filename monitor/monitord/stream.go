package monitord

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
)

// attachBuffer is how many chunks of output an attached client may lag
// behind before it is cut off: the container must never wait for a slow
// client, and silently dropping part of its output would be worse.
const attachBuffer = 256

// ctrStreams is a container's attach state.
type ctrStreams struct {
	// attMu guards att only; output copiers take it for every chunk, so
	// it is never held across anything slow.
	attMu sync.Mutex
	att   []*attachment

	// console is the terminal's master for a TTY container: output is
	// read from it, attached input written to it, resizes applied to it.
	console   *os.File
	stdinOnce bool
}

// setConsole keeps the terminal's master and returns it, made pollable:
// closing it then interrupts the copier's read, which a blocking file's
// close would wait for.
func (c *ctr) setConsole(master *os.File) *os.File {
	if fd, err := unix.Dup(int(master.Fd())); err == nil {
		unix.CloseOnExec(fd)
		if err := unix.SetNonblock(fd, true); err == nil {
			master.Close()
			master = os.NewFile(uintptr(fd), "console")
		} else {
			unix.Close(fd)
		}
	}
	c.console = master
	return master
}

func isStreamOp(op string) bool { return op == monitor.OpExecStream || op == monitor.OpAttach }

// serveStream answers OpExecStream and OpAttach, whose connection carries
// the streams after the response.
func (s *Server) serveStream(conn *net.UnixConn, r *bufio.Reader, req *monitor.Request) {
	reply := func(resp *monitor.Response, files ...*os.File) error {
		resp.Version = monitor.ProtocolVersion
		data, _ := json.Marshal(resp)
		var oob []byte
		if len(files) > 0 {
			fds := make([]int, len(files))
			for i, f := range files {
				fds[i] = int(f.Fd())
			}
			oob = unix.UnixRights(fds...)
		}
		_, _, err := conn.WriteMsgUnix(append(data, '\n'), oob, nil)
		return err
	}
	if req.Stream == nil {
		reply(fail(monitor.CodeInvalid, errors.New("stream: no options")))
		return
	}
	c, err := s.get(req.ID)
	if err != nil {
		reply(fail(monitor.CodeNotFound, err))
		return
	}
	if req.Op == monitor.OpExecStream {
		c.execStream(conn, r, req.Stream, reply)
	} else {
		c.attach(conn, r, req.Stream, reply)
	}
}

func (c *ctr) execStream(conn *net.UnixConn, r *bufio.Reader, o *monitor.StreamRequest, reply func(*monitor.Response, ...*os.File) error) {
	if len(o.Args) == 0 {
		reply(fail(monitor.CodeInvalid, errors.New("exec: no command")))
		return
	}
	req := &monitor.SpawnRequest{Op: monitor.SpawnExec, ID: c.id, Dir: c.dir, Args: o.Args}
	// Ours are sent to berth, theirs go to the process; both are closed
	// here once the process runs (berth has its own copies).
	var ours, theirs []*os.File
	closeAll := func() {
		for _, f := range append(ours, theirs...) {
			f.Close()
		}
		ours, theirs = nil, nil
	}
	var console *os.File
	if o.TTY {
		parent, child, err := socketPair("console")
		if err != nil {
			reply(fail("", err))
			return
		}
		req.TTY, req.Width, req.Height = true, o.Width, o.Height
		console = parent
		theirs = append(theirs, child)
		defer parent.Close()
	} else {
		for _, s := range []struct {
			want bool
			in   bool
			set  *bool
		}{{o.Stdin, true, &req.Stdin}, {o.Stdout, false, &req.Stdout}, {o.Stderr, false, &req.Stderr}} {
			if !s.want {
				continue
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				closeAll()
				reply(fail("", err))
				return
			}
			if s.in {
				ours, theirs = append(ours, pw), append(theirs, pr)
			} else {
				ours, theirs = append(ours, pr), append(theirs, pw)
			}
			*s.set = true
		}
	}
	c.mu.Lock()
	running := c.exit == nil && c.started
	c.mu.Unlock()
	if !running {
		closeAll()
		reply(fail(monitor.CodeNotRunning, fmt.Errorf("container %s: %w", c.id, errNotRunning)))
		return
	}
	p, _, err := c.srv.spawn(req, theirs...)
	for _, f := range theirs {
		f.Close()
	}
	theirs = nil
	if err != nil {
		closeAll()
		reply(fail("", fmt.Errorf("container %s: exec %q: %w", c.id, o.Args[0], err)))
		return
	}
	defer c.srv.forget(p)
	if console != nil {
		master, err := recvFile(console)
		if err != nil {
			p.signal(unix.SIGKILL)
			p.wait()
			closeAll()
			reply(fail("", fmt.Errorf("container %s: receive exec terminal: %w", c.id, err)))
			return
		}
		ours = append(ours, master)
	}
	err = reply(&monitor.Response{Pid: p.pid}, ours...)
	closeAll()

	type waitResult struct {
		ws  unix.WaitStatus
		err error
	}
	waited := make(chan waitResult, 1)
	go func() {
		ws, err := p.wait()
		waited <- waitResult{ws, err}
	}()
	hangup := make(chan struct{})
	go func() {
		// Berth sends nothing more: a read returns only when it hangs up.
		r.ReadByte()
		close(hangup)
	}()
	if err != nil {
		p.signal(unix.SIGKILL)
		<-waited
		return
	}
	select {
	case st := <-waited:
		e := exitOf(st.ws, st.err)
		e.FinishedAt = time.Time{}
		reply(&monitor.Response{Exit: e})
	case <-hangup:
		// Nobody is left to read the output or see the exit.
		p.signal(unix.SIGKILL)
		<-waited
	}
}

// attachment is one client attached to the container's streams.
type attachment struct {
	stdout, stderr bool
	out            chan frame
	quit           chan struct{} // closed to cut the client off
	quitOnce       sync.Once
	end            chan struct{} // closed when the container has exited
	exit           *monitor.Exit
}

type frame struct {
	kind byte
	data []byte
}

func (a *attachment) stop() { a.quitOnce.Do(func() { close(a.quit) }) }

func (c *ctr) attach(conn *net.UnixConn, r *bufio.Reader, o *monitor.StreamRequest, reply func(*monitor.Response, ...*os.File) error) {
	a := &attachment{
		stdout: o.Stdout, stderr: o.Stderr,
		out: make(chan frame, attachBuffer), quit: make(chan struct{}), end: make(chan struct{}),
	}
	c.mu.Lock()
	exited := c.exit != nil
	if !exited {
		c.attMu.Lock()
		c.att = append(c.att, a)
		c.attMu.Unlock()
	}
	c.mu.Unlock()
	if exited {
		reply(fail(monitor.CodeNotRunning, fmt.Errorf("container %s: %w", c.id, errNotRunning)))
		return
	}
	defer c.detach(a)
	if err := reply(&monitor.Response{}); err != nil {
		return
	}
	go c.attachWriter(conn, a)
	for {
		kind, payload, err := monitor.ReadFrame(r)
		if err != nil {
			break
		}
		switch kind {
		case monitor.FrameStdin:
			if err := c.writeStdin(payload); err != nil {
				c.srv.log.Debug("attach stdin", "container", c.id, "error", err)
			}
		case monitor.FrameStdinClose:
			c.closeStdinOnce()
		case monitor.FrameResize:
			if w, h, ok := monitor.ParseResize(payload); ok {
				c.resize(w, h)
			}
		}
	}
	a.stop()
	if o.Stdin {
		// stdin_once: the first attach session that had stdin is over.
		c.closeStdinOnce()
	}
}

// attachWriter sends the output queued for a client, then the exit.
func (c *ctr) attachWriter(conn *net.UnixConn, a *attachment) {
	defer conn.Close()
	for {
		select {
		case f := <-a.out:
			if monitor.WriteFrame(conn, f.kind, f.data) != nil {
				a.stop()
				return
			}
		case <-a.quit:
			return
		case <-a.end:
		drain:
			for {
				select {
				case f := <-a.out:
					if monitor.WriteFrame(conn, f.kind, f.data) != nil {
						return
					}
				default:
					break drain
				}
			}
			data, _ := json.Marshal(a.exit)
			monitor.WriteFrame(conn, monitor.FrameExit, data)
			return
		}
	}
}

func (c *ctr) detach(a *attachment) {
	a.stop()
	c.attMu.Lock()
	defer c.attMu.Unlock()
	for i, x := range c.att {
		if x == a {
			c.att = append(c.att[:i:i], c.att[i+1:]...)
			return
		}
	}
}

// fanout hands a chunk of output to every client attached to its stream.
func (c *ctr) fanout(kind byte, p []byte) {
	c.attMu.Lock()
	defer c.attMu.Unlock()
	if len(c.att) == 0 {
		return
	}
	data := append([]byte(nil), p...)
	for _, a := range c.att {
		if (kind == monitor.FrameStdout && !a.stdout) || (kind == monitor.FrameStderr && !a.stderr) {
			continue
		}
		select {
		case a.out <- frame{kind, data}:
		default:
			c.srv.log.Warn("attached client too slow: detached", "container", c.id)
			a.stop()
		}
	}
}

// endAttachments tells every attached client that the container exited;
// its output has been drained by then.
func (c *ctr) endAttachments(e *monitor.Exit) {
	c.attMu.Lock()
	defer c.attMu.Unlock()
	for _, a := range c.att {
		a.exit = e
		close(a.end)
	}
	c.att = nil
}

func (c *ctr) writeStdin(p []byte) error {
	c.mu.Lock()
	// A terminal is the process's stdin: a stdin pipe made for it at
	// create goes nowhere.
	w := c.console
	if w == nil {
		w = c.stdin
	}
	c.mu.Unlock()
	if w == nil {
		return errors.New("container has no stdin")
	}
	_, err := w.Write(p)
	return err
}

// closeStdinOnce ends the container's input if it was created with
// StdinOnce. A terminal's master cannot be half-closed: it is closed as a
// whole, which hangs the terminal up, as the container's creator asked.
func (c *ctr) closeStdinOnce() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stdinOnce {
		return
	}
	if c.stdin != nil {
		c.stdin.Close()
		c.stdin = nil
	}
	if c.console != nil {
		c.console.Close()
	}
}

func (c *ctr) resize(width, height uint16) {
	c.mu.Lock()
	f := c.console
	c.mu.Unlock()
	if f == nil {
		return
	}
	if err := setWinsize(f, width, height); err != nil {
		c.srv.log.Debug("resize terminal", "container", c.id, "error", err)
	}
}

// setWinsize sets a terminal's size through its master. SyscallConn, not
// Fd: Fd would turn the file back to blocking mode.
func setWinsize(f *os.File, width, height uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: width, Row: height})
	}); err != nil {
		return err
	}
	return ioctlErr
}
