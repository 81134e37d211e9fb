package monitord

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
)

// DefaultMaxOutput is the kubelet's cap on an exec's output.
const DefaultMaxOutput = 16 << 20

// execSync runs a command in the container, as a child of the monitor, and
// returns its exit code and capped output. On timeout the process is
// killed and the result says so.
func (c *ctr) execSync(ctx context.Context, r *monitor.ExecRequest) (*monitor.ExecResult, error) {
	max := r.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	c.mu.Lock()
	if c.exit != nil || !c.started {
		c.mu.Unlock()
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, fmt.Errorf("container %s: %w", c.id, errNotRunning)
	}
	c.mu.Unlock()
	p, _, err := c.srv.spawn(&monitor.SpawnRequest{Op: monitor.SpawnExec, ID: c.id, Dir: c.dir, Args: r.Args, Stdout: true, Stderr: true}, outW, errW)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("container %s: exec %q: %w", c.id, r.Args[0], err)
	}
	defer c.srv.forget(p)
	stdout, stderr := newCapped(max), newCapped(max)
	copied := make(chan struct{}, 2)
	go func() { copySmall(stdout, outR); outR.Close(); copied <- struct{}{} }()
	go func() { copySmall(stderr, errR); errR.Close(); copied <- struct{}{} }()

	type waitResult struct {
		ws  unix.WaitStatus
		err error
	}
	waited := make(chan waitResult, 1)
	go func() {
		ws, err := p.wait()
		waited <- waitResult{ws, err}
	}()
	var timeout <-chan time.Time
	if r.Timeout > 0 {
		t := time.NewTimer(r.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	res := &monitor.ExecResult{}
	var st waitResult
	select {
	case st = <-waited:
	case <-timeout:
		res.TimedOut = true
	case <-ctx.Done():
		res.TimedOut = true
	}
	if res.TimedOut {
		p.signal(unix.SIGKILL)
		st = <-waited
	}
	// The command's children may keep the pipes open: give them a moment,
	// then answer with what was read, and close the read ends, so that
	// what still writes (a background child) gets EPIPE rather than a
	// reader for as long as it lives.
	deadline := time.After(drainTimeout)
	for i := 0; i < 2; i++ {
		select {
		case <-copied:
		case <-deadline:
			outR.Close()
			errR.Close()
			i = 2
		}
	}
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	res.Code = exitOf(st.ws, st.err).Code
	if res.TimedOut && ctx.Err() != nil {
		return nil, errors.New("exec cancelled by the caller")
	}
	return res, nil
}

// copySmall copies with a small buffer: io.Copy from an *os.File
// allocates 32 kB per call (File.WriteTo falls back to it), 64 kB of
// garbage per exec for output that is mostly a few bytes. A probe runs an
// exec every few seconds in every pod: that garbage is what made an idle
// monitor's heap grow.
func copySmall(dst io.Writer, src *os.File) {
	io.CopyBuffer(dst, struct{ io.Reader }{src}, make([]byte, 4<<10))
}

// capped keeps the first max bytes written and discards the rest, without
// ever failing a write (the writer must keep draining the pipe).
type capped struct {
	buf []byte
	max int
	mu  chan struct{}
}

func newCapped(max int) *capped { return &capped{max: max, mu: make(chan struct{}, 1)} }

func (c *capped) Write(p []byte) (int, error) {
	c.mu <- struct{}{}
	defer func() { <-c.mu }()
	if room := c.max - len(c.buf); room > 0 {
		if len(p) < room {
			room = len(p)
		}
		c.buf = append(c.buf, p[:room]...)
	}
	return len(p), nil
}

func (c *capped) Bytes() []byte {
	c.mu <- struct{}{}
	defer func() { <-c.mu }()
	return append([]byte(nil), c.buf...)
}
