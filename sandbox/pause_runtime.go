package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/sandbox/pause"
)

// PauseSpec is the pause process of one pod.
type PauseSpec struct {
	PodID string
	// NetNS is the pinned namespace to join; empty keeps the host's.
	NetNS                  string
	NewIPC, NewUTS, NewPID bool
	Hostname               string
	Sysctls                map[string]string
	// Cgroup is pause's cgroup, prepared: CgroupPaths are its
	// directories by hierarchy (cgroup.Manager.Prepare), for a runtime
	// that joins pause to it with a manager of its own.
	Cgroup      cgroup.Cgroup
	CgroupPaths map[string]string
	// Attach puts a pause started by berth itself into the pod cgroup.
	Attach func(pid int) error
	// Config is the pod's configuration.
	Config *runtimeapi.PodSandboxConfig
	// UserNS, when set, clones pause into a new user namespace with its
	// mappings (the pod's, mode POD) and into a new network namespace
	// that user namespace owns: NetNS is then empty, and the sandbox pins
	// pause's network namespace once it runs.
	UserNS *runtimeapi.UserNamespace
	// HostNetwork keeps a pause in its own user namespace on the host's
	// network (KEP-5607) rather than in a network namespace it owns.
	HostNetwork bool
}

// PauseRuntime starts and owns pause processes. Berth's runtime is the
// pod's monitor (wired in cmd/berth): it starts pause as its child, so
// that pause survives berth and its exit is recorded. DirectPause, for
// tests and tools, starts it as berth's child. Berth itself only needs
// the pid back, and watches it by pidfd.
type PauseRuntime interface {
	// Start returns once pause runs in its namespaces and cgroup with the
	// hostname and sysctls applied. On error the runtime may hold
	// something of the pod still: the caller undoes it with Stopped and
	// Removed.
	Start(ctx context.Context, spec *PauseSpec) (*Process, error)
	// Adopt reattaches, after a restart of berth, to the pause a pod's
	// record names. An error wrapping ErrProcessGone means it is gone.
	Adopt(ctx context.Context, podID string, pid int, startTime uint64) (*Process, error)
	// Stopped is called once the pod's containers and pause have been
	// stopped (or a failed start is undone): what the runtime keeps
	// running for the pod, such as its monitor, ends. Idempotent.
	Stopped(ctx context.Context, podID string) error
	// Removed forgets the pod: what the runtime keeps on disk for it.
	// Idempotent.
	Removed(ctx context.Context, podID string) error
}

// DirectPause starts pause as a child of berth: a clone into new
// IPC/UTS/PID namespaces, made from a thread that entered the pod's netns
// so that the child is born in it. It is in its own process group so that
// a signal to berth's group (a terminal's ^C, a crash) does not reach it.
type DirectPause struct {
	// Command runs pause; the default is pause.Binary next to this
	// binary, else this binary with pause.Subcommand.
	Command []string
}

// PauseCommand returns the command line and environment that run the
// built-in pause for spec, with command (default: the one next to this
// binary). Pause reports on fd 3 (pause.SyncFD).
func PauseCommand(spec *PauseSpec, command []string) (args, env []string, err error) {
	if len(command) == 0 {
		if command, err = defaultPauseCommand(); err != nil {
			return nil, nil, fmt.Errorf("pod %s: find the pause binary: %w", spec.PodID, err)
		}
	}
	args = append(slices.Clone(command), pause.Spec{Hostname: spec.Hostname, Sysctls: spec.Sysctls}.Args()...)
	// A small, fixed environment: pause needs nothing of berth's; when it
	// runs as Go (`berth pause`), one P keeps its runtime to a thread or two.
	return args, []string{"GOMAXPROCS=1", "GOTRACEBACK=none"}, nil
}

// defaultPauseCommand prefers the small pause binary: a pod's pause then
// costs ~0.15 MB instead of the ~14 MB of the whole berth binary.
func defaultPauseCommand() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	small := filepath.Join(filepath.Dir(exe), pause.Binary)
	if st, err := os.Stat(small); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return []string{small}, nil
	}
	return []string{exe, pause.Subcommand}, nil
}

// Adopt implements PauseRuntime: pause is found again by pid and start
// time.
func (d *DirectPause) Adopt(ctx context.Context, podID string, pid int, startTime uint64) (*Process, error) {
	return OpenProcess(pid, startTime, nil)
}

// Stopped implements PauseRuntime: nothing else runs for the pod.
func (d *DirectPause) Stopped(ctx context.Context, podID string) error { return nil }

// Removed implements PauseRuntime: nothing is kept for the pod.
func (d *DirectPause) Removed(ctx context.Context, podID string) error { return nil }

// Start implements PauseRuntime.
func (d *DirectPause) Start(ctx context.Context, spec *PauseSpec) (*Process, error) {
	if spec.UserNS != nil {
		return nil, fmt.Errorf("pod %s: %w: user namespaces need the monitor's pause", spec.PodID, ErrInvalid)
	}
	args, env, err := PauseCommand(spec, d.Command)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	launch := monitor.PauseLaunch{
		Cmd:    cmd,
		NetNS:  spec.NetNS,
		NewIPC: spec.NewIPC,
		NewUTS: spec.NewUTS,
		NewPID: spec.NewPID,
		Attach: spec.Attach,
	}
	if dl, ok := ctx.Deadline(); ok {
		launch.Timeout = time.Until(dl)
	}
	if err := launch.Start(); err != nil {
		return nil, fmt.Errorf("pod %s: %w", spec.PodID, err)
	}
	proc, err := OpenProcess(cmd.Process.Pid, 0, func() { cmd.Wait() })
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("pod %s: watch pause: %w", spec.PodID, err)
	}
	return proc, nil
}
