// Package monitor is the per-pod monitor, the pod's own process: the
// protocol between berth and it, berth's side of it (starting a monitor,
// calling it, reading the exit files it leaves, launching pause), with the
// monitor's side beside it (monitord, binary berth-monitor) and the CRI
// log writer it uses (logs). Both sandbox and container use it; it uses
// neither.
//
// The monitor is the parent of pause and of every container of its pod. It outlives berth, so berth can restart
// without any container noticing: logs keep being written and exits keep
// being recorded, to files berth reads when it comes back.
//
// The protocol is one JSON request and one JSON response per connection on
// a unix socket: small enough to keep the monitor small, and a dead monitor
// shows as a refused connection.
package monitor

import (
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Operations.
const (
	OpCreate   = "create"
	OpStart    = "start"
	OpSignal   = "signal"
	OpWait     = "wait"
	OpExec     = "exec"
	OpReopen   = "reopen-log"
	OpUpdate   = "update"
	OpStatus   = "status"
	OpDelete   = "delete"
	OpShutdown = "shutdown"
	OpPing     = "ping"
)

// Files in a container's directory.
const (
	// SpecFile is the OCI runtime spec berth writes before create.
	SpecFile = "config.json"
	// ExitFile is written by the monitor, atomically, when the container's
	// process exits.
	ExitFile = "exit.json"
)

// Request is one call.
type Request struct {
	// Version is the protocol version of the caller (version.go).
	Version   int                   `json:"version,omitempty"`
	Op        string                `json:"op"`
	ID        string                `json:"id,omitempty"`
	Create    *CreateRequest        `json:"create,omitempty"`
	Signal    int                   `json:"signal,omitempty"`
	Exec      *ExecRequest          `json:"exec,omitempty"`
	Resources *specs.LinuxResources `json:"resources,omitempty"`
	Pause     *PauseRequest         `json:"pause,omitempty"`
	Stream    *StreamRequest        `json:"stream,omitempty"` // OpExecStream, OpAttach (stream.go)
}

// CreateRequest creates a container, left blocked before its user process
// runs until OpStart.
type CreateRequest struct {
	// Dir holds SpecFile; the monitor writes ExitFile there.
	Dir string `json:"dir"`
	// LogPath is the CRI log file; empty discards the output.
	LogPath   string `json:"logPath,omitempty"`
	Stdin     bool   `json:"stdin,omitempty"`
	StdinOnce bool   `json:"stdinOnce,omitempty"`
}

// ExecRequest runs a command in a running container and collects its
// output.
type ExecRequest struct {
	Args    []string      `json:"args"`
	Timeout time.Duration `json:"timeout,omitempty"` // zero: none
	// MaxOutput caps each of stdout and stderr; the rest is discarded.
	MaxOutput int `json:"maxOutput,omitempty"`
}

// Response is the answer to one call. Error is empty on success; Code
// classifies it.
type Response struct {
	// Version is the protocol version of the monitor (version.go).
	Version int         `json:"version,omitempty"`
	Error   string      `json:"error,omitempty"`
	Code    string      `json:"code,omitempty"`
	Pid     int         `json:"pid,omitempty"`
	State   string      `json:"state,omitempty"`
	Exit    *Exit       `json:"exit,omitempty"`
	Exec    *ExecResult `json:"execResult,omitempty"`
}

// Error codes.
const (
	CodeNotFound   = "not-found"
	CodeNotRunning = "not-running"
	CodeInvalid    = "invalid"
	// CodeBusy refuses a shutdown while containers of the pod still run.
	CodeBusy = "busy"
)

// Container states as the monitor sees them.
const (
	StateCreated = "created"
	StateRunning = "running"
	StateExited  = "exited"
)

// Exit is how a container's process ended.
type Exit struct {
	Code       int       `json:"code"`
	Signal     int       `json:"signal,omitempty"`
	FinishedAt time.Time `json:"finishedAt"`
	OOMKilled  bool      `json:"oomKilled,omitempty"`
	// Message says what went wrong outside the process, if anything.
	Message string `json:"message,omitempty"`
}

// ExecResult is the outcome of an exec.
type ExecResult struct {
	Code     int    `json:"code"`
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
}
