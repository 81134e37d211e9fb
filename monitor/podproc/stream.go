package podproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/berth-runtime/berth/monitor"
)

// ExecRequest runs a command in a running container, as its process runs
// (the spec's user, environment and working directory).
type ExecRequest struct {
	ID   string
	Args []string
	// The stdio berth wants: with TTY, a terminal alone (its master),
	// sized Width × Height; else a pipe for each of those asked.
	Stdin, Stdout, Stderr, TTY bool
	Width, Height              uint16
}

// ExecSession is a command Exec started. The pod process holds none of
// its output: berth reads it from the descriptors it was sent.
type ExecSession struct {
	Pid int
	// Stdin is a write end, Stdout and Stderr read ends, those asked for;
	// Console alone with TTY. Close closes them.
	Stdin, Stdout, Stderr, Console *os.File
	conn                           *net.UnixConn
	r                              *bufio.Reader
}

// Exec starts a command in container r.ID. A hangup (Close) before it
// ends kills it.
func (c *Client) Exec(ctx context.Context, r *ExecRequest) (*ExecSession, error) {
	if len(r.Args) == 0 {
		return nil, errors.New("exec: no command")
	}
	if len(r.Args) > MaxArgs {
		return nil, fmt.Errorf("exec in %s: over %d arguments", r.ID, MaxArgs)
	}
	f := idFrame(TypeExec, r.ID)
	for _, a := range r.Args {
		f.str(tagArg, a)
	}
	var fl Flags
	want := 0
	for _, x := range []struct {
		on bool
		f  Flags
	}{{r.Stdin, FlagStdin}, {r.Stdout, FlagStdout}, {r.Stderr, FlagStderr}} {
		if x.on {
			fl |= x.f
			want++
		}
	}
	if r.TTY {
		fl, want = FlagTTY, 1
		f.u32(tagWidth, uint32(r.Width))
		f.u32(tagHeight, uint32(r.Height))
	}
	if fl != 0 {
		f.u32(tagFlags, uint32(fl))
	}
	m, files, conn, err := c.exchange(ctx, f)
	if err != nil {
		return nil, err
	}
	if len(files) != want {
		closeFiles(files)
		conn.Close()
		return nil, fmt.Errorf("pod process %s: exec: %d descriptors, want %d", c.Socket, len(files), want)
	}
	s := &ExecSession{Pid: int(m.Pid), conn: conn, r: bufio.NewReader(conn)}
	if r.TTY {
		s.Console = files[0]
		return s, nil
	}
	for _, x := range []struct {
		on bool
		f  **os.File
	}{{r.Stdin, &s.Stdin}, {r.Stdout, &s.Stdout}, {r.Stderr, &s.Stderr}} {
		if x.on {
			*x.f, files = files[0], files[1:]
		}
	}
	return s, nil
}

// Wait returns the command's exit (FinishedAt is when it was reaped), or
// ctx's error; the session is over either way.
func (s *ExecSession) Wait(ctx context.Context) (*monitor.Exit, error) {
	stop := context.AfterFunc(ctx, func() { s.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	m, err := readFrame(s.r)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, fmt.Errorf("%w: exec: %w", monitor.ErrUnreachable, err)
	case m.Type != FrameExit:
		return nil, fmt.Errorf("exec: a frame of type %#x, not its exit", uint8(m.Type))
	}
	return exitOf(m), nil
}

// Close hangs up, which kills the command if it still runs, and closes
// the stdio.
func (s *ExecSession) Close() error {
	for _, f := range []*os.File{s.Stdin, s.Stdout, s.Stderr, s.Console} {
		if f != nil {
			f.Close()
		}
	}
	return s.conn.Close()
}

// Hangup ends the session without closing the stdio: a command still
// running is killed.
func (s *ExecSession) Hangup() error { return s.conn.Close() }

// DefaultMaxOutput is the kubelet's cap on an exec's output.
const DefaultMaxOutput = 16 << 20

// drainTimeout: how long output is read after the command ended, while
// something it started holds the pipes.
const drainTimeout = 2 * time.Second

// ExecSync runs a command to its end and returns its exit code and
// output, each stream capped at maxOutput bytes (DefaultMaxOutput if 0).
// Past timeout (none if 0) it is killed and the result says TimedOut; ctx
// ending first is an error.
func (c *Client) ExecSync(ctx context.Context, id string, args []string, timeout time.Duration, maxOutput int) (*monitor.ExecResult, error) {
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	s, err := c.Exec(ctx, &ExecRequest{ID: id, Args: args, Stdout: true, Stderr: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var outs [2][]byte
	copied := make(chan struct{}, 2)
	for i, f := range []*os.File{s.Stdout, s.Stderr} {
		go func() {
			outs[i] = readCapped(f, maxOutput)
			copied <- struct{}{}
		}()
	}
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res := &monitor.ExecResult{}
	exit, err := s.Wait(wctx)
	switch {
	case ctx.Err() != nil:
		return nil, errors.New("exec cancelled by the caller")
	case wctx.Err() != nil:
		// Hanging up kills it; its output so far is still read.
		res.TimedOut = true
		s.conn.Close()
	case err != nil:
		return nil, err
	default:
		res.Code = exit.Code
	}
	deadline := time.NewTimer(drainTimeout)
	defer deadline.Stop()
	for i := 0; i < 2; i++ {
		select {
		case <-copied:
		case <-deadline.C:
			// Something it started holds a pipe: what was read is the
			// answer.
			s.Stdout.SetReadDeadline(time.Unix(1, 0))
			s.Stderr.SetReadDeadline(time.Unix(1, 0))
			<-copied
		}
	}
	res.Stdout, res.Stderr = outs[0], outs[1]
	return res, nil
}

// readCapped reads f to its end, keeping the first max bytes.
func readCapped(f *os.File, max int) []byte {
	var out []byte
	buf := make([]byte, 4<<10)
	for {
		n, err := f.Read(buf)
		if room := max - len(out); room > 0 {
			out = append(out, buf[:min(n, room)]...)
		}
		if err != nil {
			return out
		}
	}
}

// AttachRequest joins a process's own streams: its output from then on,
// and input to its stdin.
type AttachRequest struct {
	ID                    string
	Stdin, Stdout, Stderr bool
}

// AttachSession is one client attached to a process. Output that it does
// not read fast enough gets it cut off: the process never waits for it.
type AttachSession struct {
	conn *net.UnixConn
	r    *bufio.Reader
	wmu  sync.Mutex
}

// Attach joins the streams of r.ID.
func (c *Client) Attach(ctx context.Context, r *AttachRequest) (*AttachSession, error) {
	f := idFrame(TypeAttach, r.ID)
	var fl Flags
	for _, x := range []struct {
		on bool
		f  Flags
	}{{r.Stdin, FlagStdin}, {r.Stdout, FlagStdout}, {r.Stderr, FlagStderr}} {
		if x.on {
			fl |= x.f
		}
	}
	if fl != 0 {
		f.u32(tagFlags, uint32(fl))
	}
	_, files, conn, err := c.exchange(ctx, f)
	closeFiles(files)
	if err != nil {
		return nil, err
	}
	return &AttachSession{conn: conn, r: bufio.NewReader(conn)}, nil
}

// Read returns the next output (FrameStdout or FrameStderr with its
// data), or the process's exit (FrameExit), after which nothing follows.
func (a *AttachSession) Read() (Type, []byte, *monitor.Exit, error) {
	m, err := readFrame(a.r)
	if err != nil {
		return 0, nil, nil, err
	}
	switch m.Type {
	case FrameStdout, FrameStderr:
		return m.Type, m.Data, nil, nil
	case FrameExit:
		return m.Type, nil, exitOf(m), nil
	}
	return 0, nil, nil, fmt.Errorf("attach: a frame of type %#x", uint8(m.Type))
}

func (a *AttachSession) send(f *frame) error {
	b, err := f.bytes()
	if err != nil {
		return err
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_, err = a.conn.Write(b)
	return err
}

// Write sends input to the process's stdin. The pod process takes it as
// fast as the process reads it.
func (a *AttachSession) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), MaxPayload)
		f := newFrame(FrameStdin)
		f.b = append(f.b, p[:k]...)
		if err := a.send(f); err != nil {
			return n, err
		}
		n, p = n+k, p[k:]
	}
	return n, nil
}

// CloseStdin says this client sends no more input: the process's stdin
// is closed if it was made with stdin-once.
func (a *AttachSession) CloseStdin() error { return a.send(newFrame(FrameStdinClose)) }

// Resize sets the size of the process's terminal, if it has one.
func (a *AttachSession) Resize(width, height uint16) error {
	f := newFrame(FrameResize)
	f.u32(tagWidth, uint32(width))
	f.u32(tagHeight, uint32(height))
	return a.send(f)
}

// Close detaches.
func (a *AttachSession) Close() error { return a.conn.Close() }

// readFrame reads and decodes one frame.
func readFrame(r io.Reader) (*message, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n, err := header(h[:])
	if err != nil {
		return nil, err
	}
	b := make([]byte, HeaderSize+n)
	copy(b, h[:])
	if _, err := io.ReadFull(r, b[HeaderSize:]); err != nil {
		return nil, err
	}
	return decode(b)
}

func exitOf(m *message) *monitor.Exit {
	return &monitor.Exit{Code: int(m.Exit), Signal: int(m.ExitSig), FinishedAt: time.Unix(0, int64(m.Finished)), OOMKilled: m.OOM != 0}
}
