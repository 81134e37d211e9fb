package monitord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/logs"
)

// drainTimeout bounds how long an exit waits for the output pipes to reach
// EOF. A process the container left behind (in a shared PID namespace)
// may hold them open forever; the exit must still be recorded.
const drainTimeout = 2 * time.Second

// ctr is one container. mu serialises the calls that change it.
type ctr struct {
	id  string
	srv *Server
	mu  sync.Mutex

	dir     string
	facts   specFacts
	updated *specs.LinuxResources // the resources of the last update, if any
	proc    *child                // its init, the monitor's child
	pid     int
	started bool
	log     *logs.File
	stdin   *os.File // our end of the container's stdin, when it has one
	copiers sync.WaitGroup
	cgroups map[string]string
	oom     *oomWatch // the systemd driver's oom_kill watch (oomwatch.go)

	died chan struct{} // closed once the process has exited and is reaped
	// exited is done once exit is set and recorded.
	exited     context.Context
	markExited context.CancelFunc
	exit       *monitor.Exit

	ctrStreams // attach (stream.go)
}

func (c *ctr) create(o *monitor.CreateRequest) (err error) {
	c.dir = o.Dir
	c.stdinOnce = o.StdinOnce
	data, err := os.ReadFile(filepath.Join(o.Dir, monitor.SpecFile))
	if err != nil {
		return fmt.Errorf("container %s: read spec: %w", c.id, err)
	}
	// The few facts the monitor acts on, not the spec: the helper reads
	// the rest from the file, and the monitor keeps nothing of it.
	if err := json.Unmarshal(data, &c.facts); err != nil {
		return fmt.Errorf("container %s: decode spec: %w", c.id, err)
	}
	if c.facts.Process == nil {
		return fmt.Errorf("container %s: spec without a process", c.id)
	}
	if c.facts.hostPID() {
		c.srv.expectOrphans()
	}
	if o.LogPath != "" {
		if c.log, err = logs.Open(o.LogPath); err != nil {
			return fmt.Errorf("container %s: %w", c.id, err)
		}
	}
	var closeOnFail, theirs []*os.File
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
		if err != nil {
			for _, f := range closeOnFail {
				f.Close()
			}
			if c.log != nil {
				c.log.Close()
			}
		}
	}()
	req := &monitor.SpawnRequest{Op: monitor.SpawnCreate, ID: c.id, Dir: o.Dir}
	var outputs []*os.File
	var console *os.File
	if c.facts.Process.Terminal {
		parent, child, err := socketPair("console")
		if err != nil {
			return err
		}
		req.TTY = true
		theirs = append(theirs, child)
		closeOnFail = append(closeOnFail, parent)
		console = parent
	} else {
		if o.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			req.Stdin, c.stdin = true, w
			theirs = append(theirs, r)
			closeOnFail = append(closeOnFail, w)
		}
		for range 2 {
			r, w, err := outputPipe()
			if err != nil {
				return err
			}
			outputs = append(outputs, r)
			theirs = append(theirs, w)
			closeOnFail = append(closeOnFail, r)
		}
		req.Stdout, req.Stderr = true, true
	}
	proc, res, err := c.srv.spawn(req, theirs...)
	if err != nil {
		// What a helper killed half-way left (a state dir would block the
		// next create with this id; an init may wait on its fifo).
		c.srv.destroy(c.id)
		return err
	}
	for _, f := range theirs {
		f.Close()
	}
	theirs = nil
	c.proc, c.pid, c.cgroups = proc, proc.pid, res.Cgroups
	c.watchOOM()
	if console != nil {
		// Sent by the init before the helper's answer; the init and the
		// helper hold no end any more: nothing sent reads as EOF.
		master, err := recvFile(console)
		console.Close()
		if err != nil {
			c.kill()
			c.oomSeen(0)
			return fmt.Errorf("container %s: receive console: %w", c.id, err)
		}
		// A terminal keeps a goroutine of its own: closing the master
		// (StdinOnce) must end its copier's read, and it is rare.
		c.copiers.Add(1)
		go c.copy(logs.Stdout, c.setConsole(master))
	}
	streams := []string{logs.Stdout, logs.Stderr}
	for i, r := range outputs {
		c.copiers.Add(1)
		if err := c.watchOutput(streams[i], r); err != nil {
			c.srv.log.Warn("watch container output", "container", c.id, "error", err)
			go c.copy(streams[i], r)
		}
	}
	c.srv.onExit(c.proc.pidfd, c.wait)
	return nil
}

// kill ends a container whose create failed after its init started: the
// init is killed, reaped and forgotten, its leftovers destroyed.
func (c *ctr) kill() {
	c.proc.signal(unix.SIGKILL)
	c.proc.wait()
	c.srv.forget(c.proc)
	c.srv.destroy(c.id)
}

// destroy has the helper remove what libcontainer keeps of a container:
// processes left in its cgroup, the cgroup, the state dir.
func (s *Server) destroy(id string) {
	if _, _, err := s.spawn(&monitor.SpawnRequest{Op: monitor.SpawnDestroy, ID: id}); err != nil {
		s.log.Warn("destroy container leftovers", "container", id, "error", err)
	}
}

// removeLeftovers does libcontainer's destroy of an exited container
// itself where that is only removing directories, sparing a helper run
// (a Go program and libcontainer loaded) on the path of every stop: the
// container had a PID namespace of its own, so the kernel killed whatever
// was left when its init died; no poststop hook is to run; its cgroup is
// cgroupfs directories, no systemd unit. It tells whether it did; if not
// (a directory still busy, a sub-cgroup the container made), the helper
// does the whole destroy.
func (c *ctr) removeLeftovers() bool {
	if c.srv.systemd || len(c.cgroups) == 0 || !c.facts.plainDestroy() {
		return false
	}
	// Processes the kernel is still killing keep the cgroup busy a moment.
	deadline := time.Now().Add(500 * time.Millisecond)
	for _, dir := range c.cgroups {
		for {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := os.RemoveAll(filepath.Join(c.srv.root, c.id)); err != nil {
		return false
	}
	return true
}

// copy drains one output into the log: a container must never block on a
// full pipe, whatever happens to the log file or to berth.
func (c *ctr) copy(stream string, r *os.File) {
	defer c.copiers.Done()
	defer r.Close()
	each, w := c.output(stream)
	err := drain(r, each)
	w.Close()
	if err != nil && !errors.Is(err, syscall.EIO) && !errors.Is(err, os.ErrClosed) {
		// EIO is how a terminal's master says the other side is gone.
		c.srv.log.Warn("container output", "container", c.id, "stream", stream, "error", err)
	}
}

// output is where one output stream's chunks go: the log (w, closed
// once the stream ends, which ends a partial last line) and attached
// clients.
func (c *ctr) output(stream string) (each func([]byte), w io.WriteCloser) {
	kind := monitor.FrameStdout
	if stream == logs.Stderr {
		kind = monitor.FrameStderr
	}
	w = nopWriteCloser{}
	if c.log != nil {
		w = c.log.Stream(stream)
	}
	return func(p []byte) {
		c.fanout(kind, p)
		w.Write(p)
	}, w
}

// watchOutput hands one output pipe of the container to the monitor's
// poller, which copies it into the log and to attached clients until EOF.
func (c *ctr) watchOutput(stream string, r *os.File) error {
	fd, err := fdOf(r)
	if err != nil {
		return err
	}
	each, w := c.output(stream)
	poll := c.srv.poll
	err = poll.watch(fd, func() {
		n, err := unix.Read(fd, poll.buf)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return
		case n > 0:
			each(poll.buf[:n])
			return
		}
		poll.forget(fd)
		r.Close()
		w.Close()
		if err != nil {
			c.srv.log.Warn("container output", "container", c.id, "stream", stream, "error", err)
		}
		c.copiers.Done()
	})
	if err != nil {
		// The caller's copier goroutine reads it instead, blocking.
		w.Close()
		unix.SetNonblock(fd, false)
	}
	return err
}

// outputPipe is a pipe for a container's output: the write end for the
// container, the read end non-blocking for the poller, but outside Go's
// netpoller, which would be woken for its data too.
func outputPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("output pipe: %w", err)
	}
	// Wrapped while blocking, so that os does not poll it.
	r, w = os.NewFile(uintptr(fds[0]), "output"), os.NewFile(uintptr(fds[1]), "output-w")
	if err := unix.SetNonblock(fds[0], true); err != nil {
		r.Close()
		w.Close()
		return nil, nil, fmt.Errorf("output pipe: %w", err)
	}
	return r, w, nil
}

type nopWriteCloser struct{}

func (nopWriteCloser) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriteCloser) Close() error                { return nil }

// readBufs are the buffers output is read into. A stream waits for data
// holding none: an idle container (most of them, most of the time) costs
// its pipes and no memory of the monitor's.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// drain reads f until EOF, handing each chunk to each, with a buffer taken
// only once f is readable.
func drain(f *os.File, each func([]byte)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			bp := readBufs.Get().(*[]byte)
			defer readBufs.Put(bp)
			n, rerr = unix.Read(int(fd), *bp)
			if rerr == unix.EAGAIN {
				return false
			}
			if n > 0 {
				each((*bp)[:n])
			}
			return true
		})
		switch {
		case err != nil:
			return err
		case rerr == unix.EINTR:
		case rerr != nil:
			return rerr
		case n <= 0:
			return nil
		}
	}
}

func (c *ctr) wait() {
	// Parked in the netpoller until the process exits: a blocking wait
	// would hold an OS thread per container for its whole life.
	exit := exitOf(c.proc.wait())
	// The pidfd stays open until the exit is recorded: until then a stop
	// signals through it, and learns that the process is gone (ESRCH).
	c.srv.reaped(c.proc)
	close(c.died)
	exit.OOMKilled = c.oomSeen(exit.Signal) || oomKilled(c.cgroups)
	// Destroy kills what the process left in its cgroup, so the pipes they
	// hold reach EOF, and removes the cgroup and libcontainer's state.
	if !c.removeLeftovers() {
		c.srv.destroy(c.id)
	}
	drained := make(chan struct{})
	go func() { c.copiers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
	}
	if err := monitor.WriteExit(c.dir, exit); err != nil {
		c.srv.log.Error("record exit", "container", c.id, "error", err)
	}
	c.mu.Lock()
	c.exit = exit
	c.proc.pidfd.Close()
	if c.stdin != nil {
		c.stdin.Close()
		c.stdin = nil
	}
	c.mu.Unlock()
	c.markExited()
	c.endAttachments(exit)
	c.srv.log.Info("container exited", "container", c.id, "code", exit.Code, "signal", exit.Signal, "oom", exit.OOMKilled)
	settle()
}

func (c *ctr) isExited() bool { return c.exited.Err() != nil }

var errNotRunning = errors.New("container is not running")

func (c *ctr) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isExited() {
		return fmt.Errorf("container %s: %w", c.id, errNotRunning)
	}
	if c.started {
		return fmt.Errorf("container %s: already started", c.id)
	}
	if err := releaseInit(filepath.Join(c.srv.root, c.id, "exec.fifo"), c.died); err != nil {
		if errors.Is(err, errNotRunning) {
			return fmt.Errorf("container %s: %w", c.id, err)
		}
		return fmt.Errorf("container %s: start: %w", c.id, err)
	}
	c.started = true
	return nil
}

func (c *ctr) signal(sig int) error {
	if c.isExited() {
		return fmt.Errorf("container %s: %w", c.id, errNotRunning)
	}
	// By pidfd, not through libcontainer: its state lock would make a
	// stop wait behind a slow exec.
	if err := c.proc.signal(syscall.Signal(sig)); err != nil {
		// The pidfd is closed once the exit is recorded.
		if errors.Is(err, unix.ESRCH) || errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("container %s: %w", c.id, errNotRunning)
		}
		return fmt.Errorf("container %s: signal %d: %w", c.id, sig, err)
	}
	return nil
}

func (c *ctr) status() *monitor.Response {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &monitor.Response{Pid: c.pid, State: monitor.StateCreated}
	switch {
	case c.exit != nil:
		r.State, r.Exit = monitor.StateExited, c.exit
	case c.started:
		r.State = monitor.StateRunning
	}
	return r
}

func (c *ctr) reopen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.log == nil {
		return nil
	}
	return c.log.Reopen()
}

func (c *ctr) update(r *specs.LinuxResources) error {
	if r == nil {
		return errors.New("update: no resources")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exit != nil {
		return fmt.Errorf("container %s: %w", c.id, errNotRunning)
	}
	// The spec is read again, not kept: updates are rare, containers many.
	spec, err := monitor.ReadSpec(c.dir)
	if err != nil {
		return fmt.Errorf("container %s: update: %w", c.id, err)
	}
	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	res := specs.LinuxResources{}
	switch {
	case c.updated != nil:
		res = *c.updated
	case spec.Linux.Resources != nil:
		res = *spec.Linux.Resources
	}
	res.CPU, res.Memory, res.HugepageLimits, res.Unified = r.CPU, r.Memory, r.HugepageLimits, r.Unified
	if r.Pids != nil { // only NRI plugins change it
		res.Pids = r.Pids
	}
	spec.Linux.Resources = &res
	if _, _, err := c.srv.spawn(&monitor.SpawnRequest{Op: monitor.SpawnUpdate, ID: c.id, Spec: spec}); err != nil {
		return fmt.Errorf("container %s: update: %w", c.id, err)
	}
	c.updated = &res
	return nil
}

func (c *ctr) delete() error {
	if !c.isExited() {
		return fmt.Errorf("container %s: still running", c.id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.log != nil {
		c.log.Close()
		c.log = nil
	}
	return nil
}

func (c *ctr) failure(err error) *monitor.Response {
	switch {
	case errors.Is(err, errNotRunning):
		return fail(monitor.CodeNotRunning, err)
	case errors.Is(err, errNotFound):
		return fail(monitor.CodeNotFound, err)
	}
	return fail("", err)
}
