package monitor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Deadlines that unblock a pending read at once, and none.
var (
	aLongTimeAgo = time.Unix(1, 0)
	noDeadline   time.Time
)

// Streaming operations. Their connection lives on after the JSON request
// and response: it carries the streams of an interactive exec or of an
// attach.
//
// OpExecStream starts a command in the container. The response line comes
// with the command's stdio as file descriptors (SCM_RIGHTS), in this order:
// the terminal's master alone when TTY is set, else the write end of stdin
// (if Stdin), the read end of stdout (if Stdout), the read end of stderr
// (if Stderr). Berth copies them itself: the monitor is not on the data
// path. A second response line carries the exit once the command has
// ended. If berth hangs up first, the monitor kills the command.
//
// OpAttach joins the container's own streams. After the response line,
// both sides exchange frames (WriteFrame): the monitor sends the output
// the container writes from then on and a FrameExit once it has exited
// and its output is drained; berth sends stdin, its end, and terminal
// sizes. Berth hangs up to detach.
const (
	OpExecStream = "exec-stream"
	OpAttach     = "attach"
)

// StreamRequest are the options of OpExecStream and OpAttach.
type StreamRequest struct {
	Args   []string `json:"args,omitempty"` // exec only
	Stdin  bool     `json:"stdin,omitempty"`
	Stdout bool     `json:"stdout,omitempty"`
	Stderr bool     `json:"stderr,omitempty"`
	TTY    bool     `json:"tty,omitempty"`
	// Width and Height are the terminal's first size (exec with TTY).
	Width  uint16 `json:"width,omitempty"`
	Height uint16 `json:"height,omitempty"`
}

// Frame kinds on an attach connection.
const (
	FrameStdout byte = 1 // monitor → berth
	FrameStderr byte = 2 // monitor → berth
	FrameExit   byte = 3 // monitor → berth: JSON Exit; nothing follows
	FrameStdin  byte = 4 // berth → monitor
	// FrameStdinClose: this client sends no more input. The container's
	// stdin is closed if it was created with StdinOnce.
	FrameStdinClose byte = 5
	// FrameResize: the terminal's width and height, two big-endian uint16.
	FrameResize byte = 6
)

// MaxFrame bounds a frame's payload, so that a corrupt header cannot make
// either side allocate without limit.
const MaxFrame = 1 << 20

// WriteFrame writes one frame: its kind, its payload's length (big-endian
// uint32) and the payload, in one write.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes is over the limit", len(payload))
	}
	b := make([]byte, 5+len(payload))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame. The payload is freshly allocated.
func ReadFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes is over the limit", n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	return h[0], payload, nil
}

// ResizePayload encodes a terminal size for FrameResize.
func ResizePayload(width, height uint16) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint16(b, width)
	binary.BigEndian.PutUint16(b[2:], height)
	return b
}

// ParseResize decodes a FrameResize payload.
func ParseResize(b []byte) (width, height uint16, ok bool) {
	if len(b) != 4 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:]), true
}

// open dials the monitor and sends req. ctx bounds the dial and the
// response; the connection outlives it.
func (c *Client) open(ctx context.Context, req *Request) (*net.UnixConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	stamp(req)
	data, err := json.Marshal(req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := conn.Write(append(data, '\n')); err != nil {
		conn.Close()
		return nil, c.ioError(ctx, err)
	}
	return conn.(*net.UnixConn), nil
}

// readResponse reads the response line and the file descriptors sent with
// it; rest is what was read past the line.
func (c *Client) readResponse(ctx context.Context, conn *net.UnixConn) (resp *Response, files []*os.File, rest []byte, err error) {
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			// The deadline fired (or is firing): the session cannot be used.
			err = errors.Join(err, ctx.Err())
		}
		conn.SetReadDeadline(noDeadline)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	var line []byte
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*8))
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			fs, perr := parseRights(oob[:oobn])
			files = append(files, fs...)
			if perr != nil {
				return nil, files, nil, perr
			}
		}
		line = append(line, buf[:n]...)
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			rest = append([]byte(nil), line[i+1:]...)
			line = line[:i]
			break
		}
		if err != nil {
			return nil, files, nil, c.ioError(ctx, err)
		}
		if n == 0 {
			return nil, files, nil, c.ioError(ctx, io.ErrUnexpectedEOF)
		}
	}
	resp = &Response{}
	if err := json.Unmarshal(line, resp); err != nil {
		return nil, files, nil, fmt.Errorf("monitor %s: bad response: %w", c.Socket, err)
	}
	if err := c.checkResponse(resp); err != nil {
		return resp, files, nil, err
	}
	return resp, files, rest, nil
}

func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "monitor-stream"))
		}
	}
	return files, nil
}

// ExecSession is a command started by ExecStream.
type ExecSession struct {
	conn *net.UnixConn
	r    *bufio.Reader
	// Files are the command's stdio, in the order OpExecStream sends
	// them. The caller owns and closes them.
	Files []*os.File
	Pid   int
}

// ExecStream starts a command in container id and returns its stdio.
func (c *Client) ExecStream(ctx context.Context, id string, r *StreamRequest) (*ExecSession, error) {
	conn, err := c.open(ctx, &Request{Op: OpExecStream, ID: id, Stream: r})
	if err != nil {
		return nil, err
	}
	resp, files, rest, err := c.readResponse(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	want := 1
	if !r.TTY {
		want = 0
		for _, b := range []bool{r.Stdin, r.Stdout, r.Stderr} {
			if b {
				want++
			}
		}
	}
	if len(files) != want {
		conn.Close()
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("monitor %s: exec stream: got %d file descriptors, want %d", c.Socket, len(files), want)
	}
	return &ExecSession{
		conn:  conn,
		r:     bufio.NewReader(io.MultiReader(bytes.NewReader(rest), conn)),
		Files: files,
		Pid:   resp.Pid,
	}, nil
}

// Wait returns the command's exit, or the context's error.
func (s *ExecSession) Wait(ctx context.Context) (*Exit, error) {
	stop := context.AfterFunc(ctx, func() { s.conn.SetReadDeadline(aLongTimeAgo) })
	defer stop()
	line, err := s.r.ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	resp := &Response{}
	if err := json.Unmarshal(line, resp); err != nil {
		return nil, fmt.Errorf("exec stream: bad exit line: %w", err)
	}
	if resp.Error != "" {
		return nil, &Error{Code: resp.Code, Msg: resp.Error}
	}
	if resp.Exit == nil {
		return nil, errors.New("exec stream: exit line without an exit")
	}
	return resp.Exit, nil
}

// Close hangs up; a command still running is killed by the monitor.
func (s *ExecSession) Close() error { return s.conn.Close() }

// AttachSession is a connection to a container's own streams.
type AttachSession struct {
	conn *net.UnixConn
	r    io.Reader
	wmu  sync.Mutex
}

// Attach joins container id's streams.
func (c *Client) Attach(ctx context.Context, id string, r *StreamRequest) (*AttachSession, error) {
	conn, err := c.open(ctx, &Request{Op: OpAttach, ID: id, Stream: r})
	if err != nil {
		return nil, err
	}
	_, files, rest, err := c.readResponse(ctx, conn)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &AttachSession{conn: conn, r: bufio.NewReader(io.MultiReader(bytes.NewReader(rest), conn))}, nil
}

// ReadFrame reads the next frame the monitor sent.
func (a *AttachSession) ReadFrame() (byte, []byte, error) { return ReadFrame(a.r) }

// WriteFrame sends a frame; it is safe for concurrent use.
func (a *AttachSession) WriteFrame(kind byte, payload []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return WriteFrame(a.conn, kind, payload)
}

// Close detaches.
func (a *AttachSession) Close() error { return a.conn.Close() }
