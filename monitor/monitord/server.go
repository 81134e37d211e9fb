// Package monitord is the per-pod monitor process: the parent of pause and
// of every container of one pod. It has containers created and exec
// processes started by the spawn helper (package monitor/spawn), which
// exits once the process runs: the monitor is a child subreaper, so it
// inherits each, watches it through a pidfd, copies its output into CRI
// log files, records its exit to disk the moment it happens, and answers
// berth's calls on a unix socket (package monitor has the protocol). It
// keeps doing all of it while berth is down. It links no libcontainer
// and no cgo.
package monitord

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/berth-runtime/berth/monitor"
)

// Server is one pod's monitor.
type Server struct {
	pod       string
	root      string // libcontainer state root
	systemd   bool   // the systemd cgroup driver: scopes made over D-Bus, by the helper
	helper    string // the spawn helper's binary
	helperEnv []string
	log       *slog.Logger
	poll      *poller // containers' outputs and exits (poller.go)

	mu       sync.Mutex
	ctrs     map[string]*ctr
	pause    *pauseProc // the built-in pause, addressed by the pod's id
	shutdown bool
	done     chan struct{}
	once     sync.Once

	// reap guards known, the children the monitor waits for itself; the
	// orphan reaper (spawn.go) reaps only the others.
	reap  sync.Mutex
	known map[int]bool
	poke  chan struct{}
	// sigchld starts the SIGCHLD watch, once orphans can appear.
	sigchld sync.Once
}

// Options make a Server.
type Options struct {
	Pod string
	// Root is libcontainer's state root.
	Root string
	// Systemd is the systemd cgroup driver (else cgroupfs).
	Systemd bool
	// Helper is the spawn helper's binary, run with HelperEnv.
	Helper    string
	HelperEnv []string
	Log       *slog.Logger
}

// New returns a monitor for a pod.
func New(o Options) (*Server, error) {
	poll, err := newPoller()
	if err != nil {
		return nil, fmt.Errorf("monitor of pod %s: %w", o.Pod, err)
	}
	s := &Server{pod: o.Pod, root: o.Root, systemd: o.Systemd, helper: o.Helper, helperEnv: o.HelperEnv, log: o.Log, poll: poll,
		ctrs: map[string]*ctr{}, done: make(chan struct{}), known: map[int]bool{}, poke: make(chan struct{}, 1)}
	go s.reapOrphans()
	return s, nil
}

// Serve answers calls on l until a shutdown call finds no container left.
func (s *Server) Serve(l net.Listener) error {
	go func() {
		<-s.done
		l.Close()
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			select {
			case <-s.done:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go s.handle(conn)
	}
}

func (s *Server) handle(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	req := &monitor.Request{}
	var resp *monitor.Response
	if err := json.Unmarshal(line, req); err != nil {
		resp = fail(monitor.CodeInvalid, err)
	} else if !monitor.Served(req.Version) {
		// Refused before anything is done: a call of a version this
		// monitor does not know may mean something else than it reads.
		resp = fail(monitor.CodeVersion, fmt.Errorf("monitor of pod %s speaks protocol versions %d to %d, not the call's version %d", s.pod, monitor.MinProtocolVersion, monitor.ProtocolVersion, req.Version))
		s.log.Warn("call of a protocol version not served", "op", req.Op, "version", req.Version)
	} else if uc, ok := conn.(*net.UnixConn); ok && isStreamOp(req.Op) {
		s.serveStream(uc, r, req) // stream.go
		return
	} else if req.Op == monitor.OpWait {
		resp = s.wait(conn, r, req.ID)
	} else {
		// The caller hanging up cancels a wait or an exec.
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			r.ReadByte()
			cancel()
		}()
		resp = s.dispatch(ctx, req)
		cancel()
	}
	resp.Version = monitor.ProtocolVersion
	data, _ := json.Marshal(resp)
	conn.Write(append(data, '\n'))
	settle() // memory.go
	if req.Op == monitor.OpShutdown && resp.Error == "" {
		s.once.Do(func() { close(s.done) })
	}
}

func fail(code string, err error) *monitor.Response {
	return &monitor.Response{Error: err.Error(), Code: code}
}

var errNotFound = errors.New("no such container")

func (s *Server) get(id string) (*ctr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.ctrs[id]
	if !ok {
		return nil, fmt.Errorf("container %s: %w", id, errNotFound)
	}
	return c, nil
}

func (s *Server) dispatch(ctx context.Context, req *monitor.Request) *monitor.Response {
	if req.Op == monitor.OpPing {
		return &monitor.Response{Pid: os.Getpid()}
	}
	if req.Op == monitor.OpShutdown {
		s.mu.Lock()
		defer s.mu.Unlock()
		// Exited containers may stay: their exits are on disk.
		running := 0
		for _, c := range s.ctrs {
			if !c.isExited() {
				running++
			}
		}
		if running > 0 {
			return fail(monitor.CodeBusy, fmt.Errorf("pod %s still has %d running containers", s.pod, running))
		}
		if s.pause != nil && s.pause.exited.Err() == nil {
			return fail(monitor.CodeInvalid, fmt.Errorf("pod %s: pause still runs", s.pod))
		}
		s.shutdown = true
		return &monitor.Response{}
	}
	if req.Op == monitor.OpCreate {
		return s.create(req)
	}
	if req.Op == monitor.OpRunPause {
		return s.runPause(req.Pause)
	}
	if req.ID == s.pod {
		s.mu.Lock()
		p := s.pause
		s.mu.Unlock()
		if p != nil {
			return s.pauseCall(p, req)
		}
	}
	c, err := s.get(req.ID)
	if err != nil {
		return fail(monitor.CodeNotFound, err)
	}
	switch req.Op {
	case monitor.OpStart:
		err = c.start()
	case monitor.OpSignal:
		err = c.signal(req.Signal)
	case monitor.OpStatus:
		return c.status()
	case monitor.OpExec:
		if req.Exec == nil || len(req.Exec.Args) == 0 {
			return fail(monitor.CodeInvalid, errors.New("exec: no command"))
		}
		res, err := c.execSync(ctx, req.Exec)
		if err != nil {
			return c.failure(err)
		}
		return &monitor.Response{Exec: res}
	case monitor.OpReopen:
		err = c.reopen()
	case monitor.OpUpdate:
		err = c.update(req.Resources)
	case monitor.OpDelete:
		if err = c.delete(); err == nil {
			s.mu.Lock()
			delete(s.ctrs, c.id)
			s.mu.Unlock()
		}
	default:
		return fail(monitor.CodeInvalid, fmt.Errorf("unknown operation %q", req.Op))
	}
	if err != nil {
		return c.failure(err)
	}
	return &monitor.Response{}
}

func (s *Server) create(req *monitor.Request) *monitor.Response {
	if req.ID == "" || req.Create == nil {
		return fail(monitor.CodeInvalid, errors.New("create: missing id or options"))
	}
	s.mu.Lock()
	if _, ok := s.ctrs[req.ID]; ok {
		s.mu.Unlock()
		return fail(monitor.CodeInvalid, fmt.Errorf("container %s exists", req.ID))
	}
	if s.shutdown {
		s.mu.Unlock()
		return fail(monitor.CodeInvalid, fmt.Errorf("pod %s monitor is shutting down", s.pod))
	}
	// Reserve the id while the helper works, without holding the lock.
	c := &ctr{id: req.ID, srv: s, died: make(chan struct{})}
	c.exited, c.markExited = context.WithCancel(context.Background())
	c.mu.Lock()
	s.ctrs[req.ID] = c
	s.mu.Unlock()
	err := c.create(req.Create)
	c.mu.Unlock()
	if err != nil {
		s.mu.Lock()
		delete(s.ctrs, req.ID)
		s.mu.Unlock()
		return fail(monitor.CodeInvalid, err)
	}
	return &monitor.Response{Pid: c.pid}
}

// wait answers a wait call: the exit of a container, or of pause by the
// pod's id, once it is recorded. berth holds one open per container for
// the container's whole life, so it costs this goroutine and no other:
// the caller hanging up ends the read below, the exit ends it through a
// read deadline.
func (s *Server) wait(conn net.Conn, r *bufio.Reader, id string) *monitor.Response {
	var exited context.Context
	var answer func() *monitor.Response
	s.mu.Lock()
	if p := s.pause; id == s.pod && p != nil {
		exited = p.exited
		answer = func() *monitor.Response {
			s.mu.Lock()
			defer s.mu.Unlock()
			return &monitor.Response{Pid: p.pid, State: monitor.StateExited, Exit: p.exit}
		}
	} else if c, ok := s.ctrs[id]; ok {
		exited = c.exited
		answer = func() *monitor.Response { return &monitor.Response{State: monitor.StateExited, Exit: c.exit} }
	}
	s.mu.Unlock()
	if exited == nil {
		return fail(monitor.CodeNotFound, fmt.Errorf("container %s: %w", id, errNotFound))
	}
	if exited.Err() == nil {
		stop := context.AfterFunc(exited, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
		r.ReadByte()
		stop()
		if exited.Err() == nil {
			return fail(monitor.CodeInvalid, errors.New("wait: the caller hung up"))
		}
	}
	return answer()
}
