package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

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
	// Attach puts the started process into the pod cgroup.
	Attach func(pid int) error
}

// PauseRuntime starts pause processes. It is an interface so that the
// per-pod monitor of a later issue can take over starting (and parenting)
// pause; berth itself only needs the pid back, and watches it by pidfd.
type PauseRuntime interface {
	// Start returns once pause runs in its namespaces and cgroup with the
	// hostname and sysctls applied; on error nothing is left running.
	Start(ctx context.Context, spec *PauseSpec) (*Process, error)
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

// defaultPauseCommand prefers the small pause binary: a pod's pause then
// costs ~2 MB instead of the ~14 MB of the whole berth binary.
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

// Start implements PauseRuntime.
func (d *DirectPause) Start(ctx context.Context, spec *PauseSpec) (*Process, error) {
	command := d.Command
	if len(command) == 0 {
		var err error
		if command, err = defaultPauseCommand(); err != nil {
			return nil, fmt.Errorf("pod %s: find the pause binary: %w", spec.PodID, err)
		}
	}
	specJSON, err := json.Marshal(pause.Spec{Hostname: spec.Hostname, Sysctls: spec.Sysctls})
	if err != nil {
		return nil, fmt.Errorf("pod %s: pause spec: %w", spec.PodID, err)
	}
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pod %s: pause sync pipe: %w", spec.PodID, err)
	}
	defer syncR.Close()

	cmd := exec.Command(command[0], command[1:]...)
	// A small, fixed environment: pause needs nothing of berth's, and one
	// P keeps its runtime to a thread or two.
	cmd.Env = []string{"GOMAXPROCS=1", "GOTRACEBACK=none", pause.SpecEnv + "=" + string(specJSON)}
	cmd.ExtraFiles = []*os.File{syncW} // fd 3 = pause.SyncFD
	cmd.Dir = "/"
	var flags uintptr
	if spec.NewIPC {
		flags |= syscall.CLONE_NEWIPC
	}
	if spec.NewUTS {
		flags |= syscall.CLONE_NEWUTS
	}
	if spec.NewPID {
		flags |= syscall.CLONE_NEWPID
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: flags}

	if spec.NetNS != "" {
		err = ns.WithNetNSPath(spec.NetNS, func(ns.NetNS) error { return cmd.Start() })
	} else {
		err = cmd.Start()
	}
	syncW.Close()
	if err != nil {
		return nil, fmt.Errorf("pod %s: start pause: %w", spec.PodID, err)
	}
	proc, err := OpenProcess(cmd.Process.Pid, 0, func() { cmd.Wait() })
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("pod %s: watch pause: %w", spec.PodID, err)
	}
	fail := func(err error) (*Process, error) {
		proc.Stop(context.WithoutCancel(ctx), 0)
		proc.Close()
		return nil, fmt.Errorf("pod %s: %w", spec.PodID, err)
	}
	if spec.Attach != nil {
		if err := spec.Attach(proc.Pid()); err != nil {
			return fail(err)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		syncR.SetReadDeadline(dl)
	} else {
		syncR.SetReadDeadline(time.Now().Add(time.Minute))
	}
	msg, err := io.ReadAll(io.LimitReader(syncR, 4096))
	switch {
	case err != nil:
		return fail(fmt.Errorf("wait for pause to start: %w", err))
	case string(msg) != "ok":
		if len(msg) == 0 {
			return fail(errors.New("pause exited during setup"))
		}
		return fail(fmt.Errorf("pause: %s", strings.TrimSpace(string(msg))))
	}
	return proc, nil
}
