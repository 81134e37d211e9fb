// Package pods is berth's side of each pod's own process, the Go monitor
// (berth-monitor, JSON lines) or the C pod process (berth-podproc, frames;
// docs/podproc.md): a typed client per pod, Client, whichever protocol it
// speaks, and the Set that starts, adopts, watches and stops them. The
// sandbox service owns the Set (a pod's process lives as long as the pod);
// the container service gets each pod's Client from it.
package pods

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/podproc"
)

// Client is berth's typed side of a pod's own process, whichever it
// is: the Go monitor (berth-monitor, JSON lines, monitor.Client) or the C
// pod process (berth-podproc, frames, podproc.Client; docs/podproc.md).
// Both report failures the same way: monitor.ErrUnreachable when the
// process is gone, monitor.ErrVersion when it speaks another protocol,
// and a *monitor.Error whose Code monitor.IsCode tells.
type Client interface {
	// Ping returns the process's pid.
	Ping(ctx context.Context) (int, error)
	// RunPause starts the pod's built-in pause, addressed by the pod's id.
	RunPause(ctx context.Context, podID string, r *monitor.PauseRequest) (int, error)
	// Create makes container id, blocked before its process runs, and
	// returns its init's pid. tty: the spec's process has a terminal.
	Create(ctx context.Context, id string, r *monitor.CreateRequest, tty bool) (int, error)
	// Restore makes container id with its process tree restored by CRIU
	// from the checkpoint extracted in r.Dir (monitor.RestoreDir),
	// running when it returns, and returns its init's pid. Only the C pod
	// process can (ErrNoRestore).
	Restore(ctx context.Context, id string, r *monitor.CreateRequest) (int, error)
	Start(ctx context.Context, id string) error
	Signal(ctx context.Context, id string, sig syscall.Signal) error
	// Wait returns once the exit is recorded.
	Wait(ctx context.Context, id string) (*Status, error)
	Status(ctx context.Context, id string) (*Status, error)
	Delete(ctx context.Context, id string) error
	Shutdown(ctx context.Context) error
	ExecSync(ctx context.Context, id string, args []string, timeout time.Duration, maxOutput int) (*monitor.ExecResult, error)
	ReopenLog(ctx context.Context, id string) error
	// Update applies resources, as UpdateContainerResources gives them,
	// to the container whose spec is in dir.
	Update(ctx context.Context, id, dir string, r *specs.LinuxResources) error
	ExecStream(ctx context.Context, id string, r *monitor.StreamRequest) (ExecSession, error)
	Attach(ctx context.Context, id string, r *monitor.StreamRequest) (AttachSession, error)
}

// Status is a process's state (monitor.State*) and, once it has
// exited, its exit.
type Status struct {
	Pid   int
	State string
	Exit  *monitor.Exit
}

// ExecSession is an interactive exec.
type ExecSession interface {
	// Files are the command's stdio, in monitor.OpExecStream's order; the
	// caller closes them.
	Files() []*os.File
	Wait(ctx context.Context) (*monitor.Exit, error)
	// Close hangs up: a command still running is killed.
	Close() error
}

// AttachSession is one client attached to a container's streams.
type AttachSession interface {
	// Read returns the next output (monitor.FrameStdout, FrameStderr), or
	// FrameExit with the exit.
	Read() (kind byte, data []byte, exit *monitor.Exit, err error)
	WriteStdin(p []byte) error
	CloseStdin() error
	Resize(width, height uint16) error
	Close() error
}

// The kinds of pod process (Options.Kind, the pod_process setting).
const (
	KindMonitor = "monitor" // the Go monitor, of pods made before the C one
	KindC       = "podproc" // the C pod process
)

// jsonClient is the Go monitor's client.
type jsonClient struct{ c *monitor.Client }

func (j jsonClient) call(ctx context.Context, req *monitor.Request) (*monitor.Response, error) {
	return j.c.Call(ctx, req)
}

func (j jsonClient) Ping(ctx context.Context) (int, error) {
	r, err := j.call(ctx, &monitor.Request{Op: monitor.OpPing})
	if err != nil {
		return 0, err
	}
	return r.Pid, nil
}

func (j jsonClient) RunPause(ctx context.Context, podID string, p *monitor.PauseRequest) (int, error) {
	r, err := j.call(ctx, &monitor.Request{Op: monitor.OpRunPause, ID: podID, Pause: p})
	if err != nil {
		return 0, err
	}
	return r.Pid, nil
}

func (j jsonClient) Create(ctx context.Context, id string, c *monitor.CreateRequest, _ bool) (int, error) {
	r, err := j.call(ctx, &monitor.Request{Op: monitor.OpCreate, ID: id, Create: c})
	if err != nil {
		return 0, err
	}
	return r.Pid, nil
}

// ErrNoRestore answers a restore in a pod whose process is the Go
// monitor, which has no restore.
var ErrNoRestore = errors.New("the pod's process (the Go monitor) cannot restore a checkpoint")

func (j jsonClient) Restore(context.Context, string, *monitor.CreateRequest) (int, error) {
	return 0, ErrNoRestore
}

func (j jsonClient) Start(ctx context.Context, id string) error {
	_, err := j.call(ctx, &monitor.Request{Op: monitor.OpStart, ID: id})
	return err
}

func (j jsonClient) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	_, err := j.call(ctx, &monitor.Request{Op: monitor.OpSignal, ID: id, Signal: int(sig)})
	return err
}

func (j jsonClient) status(ctx context.Context, op, id string) (*Status, error) {
	r, err := j.call(ctx, &monitor.Request{Op: op, ID: id})
	if err != nil {
		return nil, err
	}
	return &Status{Pid: r.Pid, State: r.State, Exit: r.Exit}, nil
}

func (j jsonClient) Wait(ctx context.Context, id string) (*Status, error) {
	return j.status(ctx, monitor.OpWait, id)
}

func (j jsonClient) Status(ctx context.Context, id string) (*Status, error) {
	return j.status(ctx, monitor.OpStatus, id)
}

func (j jsonClient) Delete(ctx context.Context, id string) error {
	_, err := j.call(ctx, &monitor.Request{Op: monitor.OpDelete, ID: id})
	return err
}

func (j jsonClient) Shutdown(ctx context.Context) error {
	_, err := j.call(ctx, &monitor.Request{Op: monitor.OpShutdown})
	return err
}

func (j jsonClient) ExecSync(ctx context.Context, id string, args []string, timeout time.Duration, maxOutput int) (*monitor.ExecResult, error) {
	r, err := j.call(ctx, &monitor.Request{Op: monitor.OpExec, ID: id, Exec: &monitor.ExecRequest{Args: args, Timeout: timeout, MaxOutput: maxOutput}})
	if err != nil {
		return nil, err
	}
	return r.Exec, nil
}

func (j jsonClient) ReopenLog(ctx context.Context, id string) error {
	_, err := j.call(ctx, &monitor.Request{Op: monitor.OpReopen, ID: id})
	return err
}

func (j jsonClient) Update(ctx context.Context, id, _ string, r *specs.LinuxResources) error {
	_, err := j.call(ctx, &monitor.Request{Op: monitor.OpUpdate, ID: id, Resources: r})
	return err
}

type jsonExec struct{ *monitor.ExecSession }

func (s jsonExec) Files() []*os.File { return s.ExecSession.Files }

func (j jsonClient) ExecStream(ctx context.Context, id string, r *monitor.StreamRequest) (ExecSession, error) {
	s, err := j.c.ExecStream(ctx, id, r)
	if err != nil {
		return nil, err
	}
	return jsonExec{s}, nil
}

type jsonAttach struct{ *monitor.AttachSession }

func (a jsonAttach) Read() (byte, []byte, *monitor.Exit, error) {
	kind, payload, err := a.ReadFrame()
	if err != nil || kind != monitor.FrameExit {
		return kind, payload, nil, err
	}
	e := &monitor.Exit{}
	json.Unmarshal(payload, e)
	return kind, nil, e, nil
}

func (a jsonAttach) WriteStdin(p []byte) error { return a.WriteFrame(monitor.FrameStdin, p) }
func (a jsonAttach) CloseStdin() error         { return a.WriteFrame(monitor.FrameStdinClose, nil) }
func (a jsonAttach) Resize(w, h uint16) error {
	return a.WriteFrame(monitor.FrameResize, monitor.ResizePayload(w, h))
}

func (j jsonClient) Attach(ctx context.Context, id string, r *monitor.StreamRequest) (AttachSession, error) {
	s, err := j.c.Attach(ctx, id, r)
	if err != nil {
		return nil, err
	}
	return jsonAttach{s}, nil
}

// cClient is the C pod process's client. Its errors are translated into
// the monitor's codes.
type cClient struct {
	c *podproc.Client
	// systemd: the pod's cgroup is a systemd scope, which the pod
	// process has the spawn helper start with pause in it.
	systemd bool
}

// cErr turns the pod process's answer into the monitor's error codes.
func cErr(err error) error {
	var pe *podproc.Error
	if !errors.As(err, &pe) {
		return err
	}
	code := ""
	switch pe.Code {
	case podproc.CodeNotFound:
		code = monitor.CodeNotFound
	case podproc.CodeNotRunning:
		code = monitor.CodeNotRunning
	case podproc.CodeBusy:
		code = monitor.CodeBusy
	case podproc.CodeInvalid:
		code = monitor.CodeInvalid
	}
	return &monitor.Error{Code: code, Msg: pe.Msg}
}

func (c cClient) Ping(ctx context.Context) (int, error) {
	r, err := c.c.Ping(ctx)
	if err != nil {
		return 0, cErr(err)
	}
	return r.Pid, nil
}

// pauseStartTimeout bounds how long pause may take to report ready.
const pauseStartTimeout = 30 * time.Second

func (c cClient) RunPause(ctx context.Context, id string, p *monitor.PauseRequest) (int, error) {
	switch {
	case p.UserNS != nil && (len(p.UserNS.UIDs) == 0 || len(p.UserNS.GIDs) == 0):
		return 0, errors.New("user namespace without uid or gid mappings")
	case p.UserNS != nil && p.NetNS != "":
		return 0, errors.New("a pause in a user namespace makes its own network namespace: no netns to join")
	case p.Cgroup != "" && !c.systemd && len(p.CgroupPaths) == 0:
		return 0, fmt.Errorf("join cgroup %s: no directories prepared", p.Cgroup)
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return 0, err
	}
	r := &podproc.RunRequest{ID: id, Dir: p.Dir, Args: p.Args, Env: p.Env, NetNS: p.NetNS,
		NewIPC: p.NewIPC, NewUTS: p.NewUTS, NewPID: p.NewPID, Sync: true}
	// cgroupfs: pause writes itself into each directory; systemd: a scope
	// is started with it, which only the spawn helper can ask for.
	if c.systemd {
		r.Scope = p.Cgroup
	} else {
		r.Join = joinOrder(p.CgroupPaths)
	}
	if p.UserNS != nil {
		r.UIDMap, r.GIDMap = idMap(p.UserNS.UIDs), idMap(p.UserNS.GIDs)
		r.HostNet = p.HostNetwork
	}
	if d, ok := p.CgroupPaths["memory"]; ok {
		r.Cgroup = d
	} else if d, ok := p.CgroupPaths[""]; ok {
		r.Cgroup = d
	}
	pid, sync, err := c.c.RunSynced(ctx, r)
	if err != nil {
		return 0, cErr(err)
	}
	defer sync.Close()
	sync.SetReadDeadline(time.Now().Add(pauseStartTimeout))
	msg, err := io.ReadAll(io.LimitReader(sync, 4096))
	if err == nil && string(msg) != "ok" {
		err = fmt.Errorf("pause: %s", msg)
		if len(msg) == 0 {
			err = errors.New("pause exited during setup")
		}
	}
	if err != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		c.c.Signal(kctx, id, syscall.SIGKILL)
		c.c.Wait(kctx, id)
		c.c.Delete(kctx, id)
		return 0, err
	}
	return pid, nil
}

// idMap is a uid_map or gid_map's text.
func idMap(ms []monitor.IDMap) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%d %d %d\n", m.ContainerID, m.HostID, m.Size)
	}
	return b.String()
}

// joinOrderV1 is the order the cgroupfs driver joins a process to its v1
// hierarchies (libcontainer's); the unified hierarchy's key is "".
var joinOrderV1 = []string{"cpuset", "devices", "memory", "cpu", "cpuacct", "pids", "blkio", "hugetlb", "net_cls", "net_prio", "perf_event", "freezer", "rdma", "misc", "name=systemd", ""}

// joinOrder lists a cgroup's directories in the order to join them.
func joinOrder(paths map[string]string) []string {
	var dirs []string
	seen := map[string]bool{}
	for _, k := range joinOrderV1 {
		if d, ok := paths[k]; ok {
			dirs, seen[k] = append(dirs, d), true
		}
	}
	var rest []string
	for k := range paths {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		dirs = append(dirs, paths[k])
	}
	return dirs
}

func (c cClient) Create(ctx context.Context, id string, r *monitor.CreateRequest, tty bool) (int, error) {
	pid, err := c.c.Create(ctx, &podproc.CreateRequest{ID: id, Dir: r.Dir, LogPath: r.LogPath, Stdin: r.Stdin, StdinOnce: r.StdinOnce, TTY: tty})
	return pid, cErr(err)
}

func (c cClient) Restore(ctx context.Context, id string, r *monitor.CreateRequest) (int, error) {
	pid, err := c.c.Create(ctx, &podproc.CreateRequest{ID: id, Dir: r.Dir, LogPath: r.LogPath, Stdin: r.Stdin, StdinOnce: r.StdinOnce, Restore: true})
	return pid, cErr(err)
}

func (c cClient) Start(ctx context.Context, id string) error { return cErr(c.c.Start(ctx, id)) }

func (c cClient) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	return cErr(c.c.Signal(ctx, id, sig))
}

var cStates = map[podproc.State]string{podproc.StateCreated: monitor.StateCreated, podproc.StateRunning: monitor.StateRunning, podproc.StateExited: monitor.StateExited}

func cStatus(st *podproc.Status, err error) (*Status, error) {
	if err != nil {
		return nil, cErr(err)
	}
	return &Status{Pid: st.Pid, State: cStates[st.State], Exit: st.Exit}, nil
}

func (c cClient) Wait(ctx context.Context, id string) (*Status, error) {
	return cStatus(c.c.Wait(ctx, id))
}

func (c cClient) Status(ctx context.Context, id string) (*Status, error) {
	return cStatus(c.c.Status(ctx, id))
}

func (c cClient) Delete(ctx context.Context, id string) error { return cErr(c.c.Delete(ctx, id)) }
func (c cClient) Shutdown(ctx context.Context) error          { return cErr(c.c.Shutdown(ctx)) }

func (c cClient) ExecSync(ctx context.Context, id string, args []string, timeout time.Duration, maxOutput int) (*monitor.ExecResult, error) {
	r, err := c.c.ExecSync(ctx, id, args, timeout, maxOutput)
	return r, cErr(err)
}

func (c cClient) ReopenLog(ctx context.Context, id string) error {
	return cErr(c.c.ReopenLog(ctx, id))
}

// ResourcesFile keeps, in a container's dir, the resources of its last
// update, on which the next one is merged (the Go monitor keeps them in
// memory; the C pod process parses no JSON).
const ResourcesFile = "resources.json"

// Update merges r into the container's resources as the Go monitor does
// (CPU, memory, huge pages, unified; pids where given) and has the pod
// process apply the result.
func (c cClient) Update(ctx context.Context, id, dir string, r *specs.LinuxResources) error {
	if r == nil {
		return errors.New("update: no resources")
	}
	res := specs.LinuxResources{}
	if data, err := os.ReadFile(filepath.Join(dir, ResourcesFile)); err == nil {
		if err := json.Unmarshal(data, &res); err != nil {
			return fmt.Errorf("update: %s: %w", ResourcesFile, err)
		}
	} else if s, err := monitor.ReadSpec(dir); err != nil {
		return fmt.Errorf("update: %w", err)
	} else if s.Linux != nil && s.Linux.Resources != nil {
		res = *s.Linux.Resources
	}
	res.CPU, res.Memory, res.HugepageLimits, res.Unified = r.CPU, r.Memory, r.HugepageLimits, r.Unified
	if r.Pids != nil {
		res.Pids = r.Pids
	}
	data, err := json.Marshal(&res)
	if err != nil {
		return err
	}
	if err := c.c.Update(ctx, id, data); err != nil {
		return cErr(err)
	}
	tmp := filepath.Join(dir, ResourcesFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, ResourcesFile))
}

type cExec struct{ *podproc.ExecSession }

func (s cExec) Files() []*os.File {
	var fs []*os.File
	for _, f := range []*os.File{s.Console, s.Stdin, s.Stdout, s.Stderr} {
		if f != nil {
			fs = append(fs, f)
		}
	}
	return fs
}

func (s cExec) Wait(ctx context.Context) (*monitor.Exit, error) {
	e, err := s.ExecSession.Wait(ctx)
	return e, cErr(err)
}

// Close hangs up; the files are the caller's (Files).
func (s cExec) Close() error { return s.ExecSession.Hangup() }

func (c cClient) ExecStream(ctx context.Context, id string, r *monitor.StreamRequest) (ExecSession, error) {
	s, err := c.c.Exec(ctx, &podproc.ExecRequest{ID: id, Args: r.Args, Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr,
		TTY: r.TTY, Width: r.Width, Height: r.Height})
	if err != nil {
		return nil, cErr(err)
	}
	return cExec{s}, nil
}

type cAttach struct{ *podproc.AttachSession }

func (a cAttach) Read() (byte, []byte, *monitor.Exit, error) {
	t, data, exit, err := a.AttachSession.Read()
	switch t {
	case podproc.FrameStdout:
		return monitor.FrameStdout, data, nil, err
	case podproc.FrameStderr:
		return monitor.FrameStderr, data, nil, err
	case podproc.FrameExit:
		return monitor.FrameExit, nil, exit, err
	}
	return 0, nil, nil, err
}

func (a cAttach) WriteStdin(p []byte) error {
	_, err := a.Write(p)
	return err
}

func (c cClient) Attach(ctx context.Context, id string, r *monitor.StreamRequest) (AttachSession, error) {
	s, err := c.c.Attach(ctx, &podproc.AttachRequest{ID: id, Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr})
	if err != nil {
		return nil, cErr(err)
	}
	return cAttach{s}, nil
}
