package podproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/monitor"
)

// Error is an error the pod process answered with.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// IsCode tells whether err is the pod process's answer with that code.
func IsCode(err error, code Code) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Code == code
}

// VersionError: the two sides share no protocol version. It wraps
// monitor.ErrVersion: the process and what it runs are alive, and a berth
// that speaks its version can take it over.
type VersionError struct {
	Socket string
	// Theirs is the version the pod process wrote its answer in.
	Theirs int
	Msg    string
}

func (e *VersionError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("pod process %s: %s (this berth speaks version %d)", e.Socket, e.Msg, Version)
	}
	return fmt.Sprintf("pod process %s speaks protocol version %d; this berth speaks %d to %d", e.Socket, e.Theirs, MinVersion, Version)
}

func (e *VersionError) Unwrap() error { return monitor.ErrVersion }

// Client calls one pod process: one connection per call, so a dead
// process shows as a refused connection (monitor.ErrUnreachable).
type Client struct {
	Socket string
}

// call sends one request and reads its one response frame.
func (c *Client) call(ctx context.Context, req *frame) (*message, error) {
	m, files, conn, err := c.exchange(ctx, req)
	closeFiles(files)
	if conn != nil {
		conn.Close()
	}
	return m, err
}

// exchange sends one request and reads its response frame with the
// descriptors sent along (an exec's stdio). On success the connection is
// left open, without a deadline, for what follows the response.
func (c *Client) exchange(ctx context.Context, req *frame) (m *message, files []*os.File, uc *net.UnixConn, err error) {
	data, err := req.bytes()
	if err != nil {
		return nil, nil, nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", monitor.ErrUnreachable, err)
	}
	uc = conn.(*net.UnixConn)
	// Closing is how a cancelled call unblocks, and how the pod process
	// learns that nobody waits any more.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() && err == nil {
			err = ctx.Err()
		}
		if err != nil {
			closeFiles(files)
			files = nil
			conn.Close()
			uc = nil
			return
		}
		conn.SetDeadline(time.Time{})
	}()
	if _, err := conn.Write(data); err != nil {
		return nil, nil, nil, c.ioError(ctx, err)
	}
	var h [HeaderSize]byte
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(h[:], oob)
	if oobn > 0 {
		var perr error
		if files, perr = parseRights(oob[:oobn]); perr != nil && err == nil {
			err = perr
		}
	}
	if err == nil && n < HeaderSize {
		_, err = io.ReadFull(conn, h[n:])
	}
	if err == nil && n == 0 {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, files, nil, c.ioError(ctx, err)
	}
	size, herr := header(h[:])
	if herr != nil && !errors.Is(herr, errVersion) {
		return nil, files, nil, fmt.Errorf("pod process %s: bad response: %w", c.Socket, herr)
	}
	resp := make([]byte, HeaderSize+size)
	copy(resp, h[:])
	if _, err := io.ReadFull(conn, resp[HeaderSize:]); err != nil {
		return nil, files, nil, c.ioError(ctx, err)
	}
	if herr != nil {
		// Written in a version this side does not read: what it says
		// cannot be trusted beyond that.
		return nil, files, nil, &VersionError{Socket: c.Socket, Theirs: int(h[1])}
	}
	if m, err = decode(resp); err != nil {
		return nil, files, nil, fmt.Errorf("pod process %s: bad response: %w", c.Socket, err)
	}
	if m.Type != Type(data[2])|TypeResponse {
		return nil, files, nil, fmt.Errorf("pod process %s: response of type %#x to a request of type %#x", c.Socket, uint8(m.Type), data[2])
	}
	switch m.Code {
	case CodeOK:
		return m, files, uc, nil
	case CodeVersion:
		return nil, files, nil, &VersionError{Socket: c.Socket, Theirs: int(m.Version), Msg: m.Msg}
	}
	return nil, files, nil, &Error{Code: m.Code, Msg: m.Msg}
}

func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	for i := range msgs {
		fds, err := syscall.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "podproc-stream"))
		}
	}
	return files, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func (c *Client) ioError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Accepted, then dropped: the process died.
	return fmt.Errorf("%w: %w", monitor.ErrUnreachable, err)
}

// PingResult identifies the pod process.
type PingResult struct {
	Pid                    int
	MinVersion, MaxVersion int
}

// Ping asks the pod process who it is and which versions it serves.
func (c *Client) Ping(ctx context.Context) (*PingResult, error) {
	m, err := c.call(ctx, newFrame(TypePing))
	if err != nil {
		return nil, err
	}
	return &PingResult{Pid: int(m.Pid), MinVersion: int(m.VMin), MaxVersion: int(m.VMax)}, nil
}

// RunRequest starts a program as the pod process's own child, with no
// helper: pause, and processes that need no container (tests).
type RunRequest struct {
	ID string
	// Dir receives exit.json (monitor.ReadExit) when the process exits.
	Dir string
	// LogPath is the CRI log file; empty discards the output.
	LogPath string
	// Args[0] is an absolute path; Env is the whole environment.
	Args []string
	Env  []string
	// Stdin gives the process a pipe as stdin (else /dev/null).
	Stdin bool
	// NetNS is a network namespace to be born in; New* are namespaces
	// the process is cloned into.
	NetNS                  string
	NewIPC, NewUTS, NewPID bool
	// Cgroup is the directory whose oom_kill counter tells an OOM kill.
	Cgroup string
	// StdinOnce closes its stdin when the first attach with stdin ends.
	StdinOnce bool
	// Join are cgroup directories (each hierarchy's, in the order to
	// join them) the process moves itself into before its program runs:
	// the cgroupfs driver's join, done before anything of it runs.
	Join []string
	// Scope is the cgroup, as an OCI cgroupsPath, that the spawn helper
	// moves the process into through the systemd driver (a transient
	// scope systemd starts with it) before its program runs; the pod
	// process must have been started with the helper and Systemd.
	Scope string
	// UIDMap and GIDMap (uid_map's and gid_map's lines) clone the
	// process into a new user namespace, where it runs as root, and a
	// new network namespace it owns (NetNS must be empty), unless
	// HostNet keeps it in the host's.
	UIDMap, GIDMap string
	HostNet        bool
	// Sync gives the process a pipe at fd 3 and berth its read end
	// (RunSynced): pause reports "ok" on it once it is set up.
	Sync bool
}

// Run starts r and returns its pid.
func (c *Client) Run(ctx context.Context, r *RunRequest) (int, error) {
	pid, sync, err := c.RunSynced(ctx, r)
	if sync != nil {
		sync.Close()
	}
	return pid, err
}

// RunSynced starts r and returns its pid, and with r.Sync the read end
// of its sync pipe, the caller's to read and close.
func (c *Client) RunSynced(ctx context.Context, r *RunRequest) (int, *os.File, error) {
	if len(r.Args) == 0 {
		return 0, nil, errors.New("run: no program")
	}
	f := newFrame(TypeRun)
	f.str(tagID, r.ID)
	f.str(tagDir, r.Dir)
	f.optStr(tagLog, r.LogPath)
	f.optStr(tagNetNS, r.NetNS)
	f.optStr(tagCgroup, r.Cgroup)
	f.optStr(tagUIDMap, r.UIDMap)
	f.optStr(tagGIDMap, r.GIDMap)
	f.optStr(tagScope, r.Scope)
	for _, a := range r.Args {
		f.str(tagArg, a)
	}
	for _, e := range r.Env {
		f.str(tagEnv, e)
	}
	for _, d := range r.Join {
		f.str(tagJoin, d)
	}
	if len(r.Args) > MaxArgs || len(r.Env) > MaxArgs || len(r.Join) > MaxJoin {
		return 0, nil, fmt.Errorf("run %s: over %d arguments or environment entries, or %d cgroups", r.ID, MaxArgs, MaxJoin)
	}
	var fl Flags
	for _, x := range []struct {
		on bool
		f  Flags
	}{{r.Stdin, FlagStdin}, {r.StdinOnce, FlagStdinOnce}, {r.NewIPC, FlagNewIPC}, {r.NewUTS, FlagNewUTS}, {r.NewPID, FlagNewPID}, {r.Sync, FlagSync}, {r.HostNet, FlagHostNet}} {
		if x.on {
			fl |= x.f
		}
	}
	if fl != 0 {
		f.u32(tagFlags, uint32(fl))
	}
	m, files, conn, err := c.exchange(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	conn.Close()
	if want := map[bool]int{true: 1}[r.Sync]; len(files) != want {
		closeFiles(files)
		return int(m.Pid), nil, fmt.Errorf("pod process %s: run %s: %d descriptors, want %d", c.Socket, r.ID, len(files), want)
	}
	if r.Sync {
		return int(m.Pid), files[0], nil
	}
	return int(m.Pid), nil, nil
}

// CreateRequest creates a container through the spawn helper, blocked
// before its process runs until Start. Dir holds the spec
// (monitor.SpecFile) and receives exit.json; the output goes to LogPath
// (none if empty) and to attached clients.
type CreateRequest struct {
	ID, Dir, LogPath string
	Stdin, StdinOnce bool
	// TTY: the spec's process has a terminal; its master is the pod
	// process's, output and input both.
	TTY bool
	// Restore: the process tree is restored by CRIU from Dir's
	// checkpoint (monitor.RestoreDir), not started: it runs once Create
	// returns, and takes no Start. No TTY.
	Restore bool
}

// Create creates a container and returns its init's pid. A helper that
// fails leaves nothing behind: the pod process destroys what it made
// before it answers.
func (c *Client) Create(ctx context.Context, r *CreateRequest) (int, error) {
	f := newFrame(TypeCreate)
	f.str(tagID, r.ID)
	f.str(tagDir, r.Dir)
	f.optStr(tagLog, r.LogPath)
	var fl Flags
	if r.Stdin {
		fl |= FlagStdin
	}
	if r.StdinOnce {
		fl |= FlagStdinOnce
	}
	if r.TTY {
		fl |= FlagTTY
	}
	if r.Restore {
		fl |= FlagRestore
	}
	if fl != 0 {
		f.u32(tagFlags, uint32(fl))
	}
	m, err := c.call(ctx, f)
	if err != nil {
		return 0, err
	}
	return int(m.Pid), nil
}

// Start lets a created container's process run.
func (c *Client) Start(ctx context.Context, id string) error {
	_, err := c.call(ctx, idFrame(TypeStart, id))
	return err
}

// Update hands the spawn helper a container's new resources: an opaque
// blob (the OCI LinuxResources as JSON) the pod process passes on.
func (c *Client) Update(ctx context.Context, id string, resources []byte) error {
	f := idFrame(TypeUpdate, id)
	f.field(tagBlob, resources)
	_, err := c.call(ctx, f)
	return err
}

func idFrame(t Type, id string) *frame {
	f := newFrame(t)
	f.str(tagID, id)
	return f
}

// Signal sends sig to a process the pod process runs; CodeNotRunning once
// it has exited.
func (c *Client) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	f := idFrame(TypeSignal, id)
	f.u32(tagSignal, uint32(sig))
	_, err := c.call(ctx, f)
	return err
}

// Status is a process's state; Exit is set once it has exited.
type Status struct {
	Pid   int
	State State
	Exit  *monitor.Exit
}

func statusOf(m *message) *Status {
	st := &Status{Pid: int(m.Pid), State: m.State}
	if m.State == StateExited {
		st.Exit = &monitor.Exit{
			Code:       int(m.Exit),
			Signal:     int(m.ExitSig),
			FinishedAt: time.Unix(0, int64(m.Finished)),
			OOMKilled:  m.OOM != 0,
		}
	}
	return st
}

// Status reports a process's state.
func (c *Client) Status(ctx context.Context, id string) (*Status, error) {
	m, err := c.call(ctx, idFrame(TypeStatus, id))
	if err != nil {
		return nil, err
	}
	return statusOf(m), nil
}

// Wait returns once a process's exit is recorded (on disk, its output
// drained), or ctx is done.
func (c *Client) Wait(ctx context.Context, id string) (*Status, error) {
	m, err := c.call(ctx, idFrame(TypeWait, id))
	if err != nil {
		return nil, err
	}
	return statusOf(m), nil
}

// ReopenLog opens a new log file at the process's log path, after the
// kubelet renamed the old one away.
func (c *Client) ReopenLog(ctx context.Context, id string) error {
	_, err := c.call(ctx, idFrame(TypeReopen, id))
	return err
}

// Delete forgets an exited process; CodeBusy while it runs.
func (c *Client) Delete(ctx context.Context, id string) error {
	_, err := c.call(ctx, idFrame(TypeDelete, id))
	return err
}

// Shutdown ends the pod process once nothing of the pod runs (CodeBusy
// while something does); the socket is gone when it has exited.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.call(ctx, newFrame(TypeShutdown))
	return err
}
