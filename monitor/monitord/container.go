package monitord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runc/libcontainer/utils"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/logs"
)

// drainTimeout bounds how long an exit waits for the output pipes to reach
// EOF. A process the container left behind (in a shared PID namespace)
// may hold them open forever; the exit must still be recorded.
const drainTimeout = 2 * time.Second

// ctr is one container. mu serialises libcontainer calls on it, which
// takes no lock of its own.
type ctr struct {
	id  string
	srv *Server
	mu  sync.Mutex

	dir     string
	spec    *specs.Spec
	c       *libcontainer.Container
	proc    *libcontainer.Process
	pid     int
	pidfd   int // signals cannot hit a recycled pid through it
	started bool
	log     *logs.File
	stdin   *os.File // our end of the container's stdin, when it has one
	copiers sync.WaitGroup
	cgroups map[string]string

	exited chan struct{} // closed once exit is set and recorded
	exit   *monitor.Exit

	ctrStreams // attach (stream.go)
}

func (c *ctr) create(o *monitor.CreateRequest) (err error) {
	c.dir = o.Dir
	c.stdinOnce = o.StdinOnce
	data, err := os.ReadFile(filepath.Join(o.Dir, monitor.SpecFile))
	if err != nil {
		return fmt.Errorf("container %s: read spec: %w", c.id, err)
	}
	c.spec = &specs.Spec{}
	if err := json.Unmarshal(data, c.spec); err != nil {
		return fmt.Errorf("container %s: decode spec: %w", c.id, err)
	}
	cfg, err := c.libcontainerConfig(c.spec)
	if err != nil {
		return fmt.Errorf("container %s: libcontainer config: %w", c.id, err)
	}
	if cfg.Rlimits, err = rlimits(c.spec.Process); err != nil {
		return fmt.Errorf("container %s: %w", c.id, err)
	}
	if o.LogPath != "" {
		if c.log, err = logs.Open(o.LogPath); err != nil {
			return fmt.Errorf("container %s: %w", c.id, err)
		}
	}
	var closeOnFail, closeAfterStart []io.Closer
	defer func() {
		for _, f := range closeAfterStart {
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
	if c.c, err = libcontainer.Create(c.srv.root, c.id, cfg); err != nil {
		return fmt.Errorf("container %s: create: %w", c.id, err)
	}
	sp := c.spec.Process
	groups := make([]int, 0, len(sp.User.AdditionalGids))
	for _, g := range sp.User.AdditionalGids {
		groups = append(groups, int(g))
	}
	p := &libcontainer.Process{
		Args: sp.Args, Env: sp.Env, Cwd: sp.Cwd,
		UID: int(sp.User.UID), GID: int(sp.User.GID), AdditionalGroups: groups,
		AppArmorProfile: sp.ApparmorProfile,
		Init:            true,
	}
	if o.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			c.c.Destroy()
			return err
		}
		p.Stdin, c.stdin = r, w
		closeAfterStart = append(closeAfterStart, r)
		closeOnFail = append(closeOnFail, w)
	}
	var outputs []*os.File
	var console *os.File
	if sp.Terminal {
		parent, child, err := utils.NewSockPair("console")
		if err != nil {
			c.c.Destroy()
			return err
		}
		p.ConsoleSocket = child
		closeAfterStart = append(closeAfterStart, child, parent)
		console = parent
	} else {
		for _, set := range []*io.Writer{&p.Stdout, &p.Stderr} {
			r, w, err := os.Pipe()
			if err != nil {
				c.c.Destroy()
				return err
			}
			*set = w
			outputs = append(outputs, r)
			closeAfterStart = append(closeAfterStart, w)
			closeOnFail = append(closeOnFail, r)
		}
	}
	if err = c.c.Start(p); err != nil {
		// A failed start leaves a state dir that would block the next
		// create with this id.
		c.c.Destroy()
		return fmt.Errorf("container %s: start init: %w", c.id, err)
	}
	c.proc = p
	if c.pid, err = p.Pid(); err != nil {
		c.c.Signal(unix.SIGKILL)
		p.Wait()
		c.c.Destroy()
		return fmt.Errorf("container %s: %w", c.id, err)
	}
	if console != nil {
		master, err := utils.RecvFile(console)
		if err != nil {
			c.c.Signal(unix.SIGKILL)
			p.Wait()
			c.c.Destroy()
			return fmt.Errorf("container %s: receive console: %w", c.id, err)
		}
		outputs = []*os.File{c.setConsole(master)}
	}
	if c.pidfd, err = unix.PidfdOpen(c.pid, 0); err != nil {
		c.c.Signal(unix.SIGKILL)
		p.Wait()
		c.c.Destroy()
		return fmt.Errorf("container %s: pidfd: %w", c.id, err)
	}
	if st, err := c.c.State(); err == nil {
		c.cgroups = st.CgroupPaths
	}
	streams := []string{logs.Stdout, logs.Stderr}
	for i, r := range outputs {
		c.copiers.Add(1)
		go c.copy(streams[i], r)
	}
	go c.wait()
	return nil
}

// copy drains one output into the log: a container must never block on a
// full pipe, whatever happens to the log file or to berth.
func (c *ctr) copy(stream string, r *os.File) {
	defer c.copiers.Done()
	defer r.Close()
	out := c.output(stream, r) // attached clients get it too
	if c.log == nil {
		io.Copy(io.Discard, out)
		return
	}
	if err := c.log.Copy(stream, out); err != nil && !errors.Is(err, syscall.EIO) {
		// EIO is how a terminal's master says the other side is gone.
		c.srv.log.Warn("container output", "container", c.id, "stream", stream, "error", err)
	}
}

func (c *ctr) wait() {
	// Parked in the netpoller until the process exits: a blocking wait
	// would hold an OS thread per container for its whole life.
	if fd, err := unix.PidfdOpen(c.pid, unix.PIDFD_NONBLOCK); err == nil {
		f := os.NewFile(uintptr(fd), "pidfd")
		waitPidfd(f)
		f.Close()
	}
	state, err := c.proc.Wait()
	exit := &monitor.Exit{FinishedAt: time.Now()}
	if state != nil {
		if ws, ok := state.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Signaled():
				exit.Signal = int(ws.Signal())
				exit.Code = 128 + exit.Signal
			default:
				exit.Code = ws.ExitStatus()
			}
		}
	} else if err != nil {
		exit.Code, exit.Message = -1, "wait: "+err.Error()
	}
	exit.OOMKilled = oomKilled(c.cgroups)
	c.mu.Lock()
	// Destroy kills what the process left in its cgroup, so the pipes they
	// hold reach EOF, and removes the cgroup and libcontainer's state.
	if err := c.c.Destroy(); err != nil {
		c.srv.log.Warn("destroy exited container", "container", c.id, "error", err)
	}
	c.mu.Unlock()
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
	unix.Close(c.pidfd)
	if c.stdin != nil {
		c.stdin.Close()
		c.stdin = nil
	}
	c.mu.Unlock()
	close(c.exited)
	c.endAttachments(exit)
	c.srv.log.Info("container exited", "container", c.id, "code", exit.Code, "signal", exit.Signal, "oom", exit.OOMKilled)
	settle()
}

func (c *ctr) isExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

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
	if err := c.c.Exec(); err != nil {
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
	if err := unix.PidfdSendSignal(c.pidfd, syscall.Signal(sig), nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
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
	next := *c.spec
	linux := *c.spec.Linux
	res := *c.spec.Linux.Resources
	res.CPU, res.Memory, res.HugepageLimits, res.Unified = r.CPU, r.Memory, r.HugepageLimits, r.Unified
	if r.Pids != nil { // only NRI plugins change it
		res.Pids = r.Pids
	}
	linux.Resources = &res
	next.Linux = &linux
	nc, err := c.libcontainerConfig(&next)
	if err != nil {
		return fmt.Errorf("container %s: update: %w", c.id, err)
	}
	cfg := c.c.Config()
	cfg.Cgroups.Resources = nc.Cgroups.Resources
	if err := c.c.Set(cfg); err != nil {
		return fmt.Errorf("container %s: update: %w", c.id, err)
	}
	c.spec = &next
	return nil
}

// libcontainerConfig is libcontainer's view of a spec. With systemd, its
// cgroupsPath is slice:prefix:name and the container's cgroup is a scope
// libcontainer has systemd make (and stop, and set) over D-Bus.
func (c *ctr) libcontainerConfig(s *specs.Spec) (*configs.Config, error) {
	return specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: c.id, Spec: s, UseSystemdCgroup: c.srv.cgroups.UseSystemd()})
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
