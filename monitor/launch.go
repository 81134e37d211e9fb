package monitor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/internal/netnsdo"
)

// PauseLaunch starts a pause process: the pod's monitor does it on
// berth's own path, berth itself (sandbox.DirectPause) in tests and tools.
// Both need the same careful start, so it lives here once, with the
// process that is pause's parent.
type PauseLaunch struct {
	// Cmd names the program, its arguments and environment; Start sets
	// its directory, sync pipe (fd PauseSyncFD) and clone flags.
	Cmd *exec.Cmd
	// NetNS is the pinned network namespace pause is born in; empty
	// keeps the caller's.
	NetNS                  string
	NewIPC, NewUTS, NewPID bool
	// Prepare, if set, may change Cmd once its sync pipe and clone flags
	// are in place (to clone it into a user namespace, say). Its cleanup
	// runs once Cmd has started, or failed to.
	Prepare func(*exec.Cmd) (cleanup func(), err error)
	// Attach puts the started process into the pod's cgroup. Pause waits
	// for nothing, but only reports once its setup is done, so a process
	// moved here is in the cgroup before the pod is ready.
	Attach func(pid int) error
	// Timeout bounds the wait for pause's report (default: a minute).
	Timeout time.Duration
}

// PauseSyncFD is where pause reports that it is set up: "ok", or the
// error, then EOF (sandbox/pause.SyncFD, the same number from pause's side).
const PauseSyncFD = 3

// Start returns once pause runs, moved by Attach and reporting ready. On
// error nothing of it is left: it is killed and reaped. On success the
// caller owns Cmd and reaps it.
func (l *PauseLaunch) Start() error {
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pause sync pipe: %w", err)
	}
	defer syncR.Close()
	cmd := l.Cmd
	if cmd.Env == nil {
		cmd.Env = []string{} // nil would hand pause the caller's environment
	}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{syncW} // PauseSyncFD
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Its own process group: a signal to its parent's group (a terminal's
	// ^C, a crash) is not for it.
	cmd.SysProcAttr.Setpgid = true
	if l.NewIPC {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWIPC
	}
	if l.NewUTS {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUTS
	}
	if l.NewPID {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWPID
	}
	if l.Prepare != nil {
		cleanup, err := l.Prepare(cmd)
		if err != nil {
			syncW.Close()
			return err
		}
		defer cleanup()
	}
	err = startInNetNS(l.NetNS, cmd)
	syncW.Close()
	if err != nil {
		return fmt.Errorf("start pause: %w", err)
	}
	fail := func(err error) error {
		cmd.Process.Kill()
		cmd.Wait()
		return err
	}
	if l.Attach != nil {
		if err := l.Attach(cmd.Process.Pid); err != nil {
			// Pause may have failed its setup and exited first (moving an
			// exited process fails): its own message says why.
			syncR.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if msg, _ := io.ReadAll(io.LimitReader(syncR, 4096)); len(msg) > 0 && string(msg) != "ok" {
				return fail(fmt.Errorf("pause: %s", strings.TrimSpace(string(msg))))
			}
			return fail(err)
		}
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	syncR.SetReadDeadline(time.Now().Add(timeout))
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
	return nil
}

// startInNetNS starts cmd from a thread that entered the network namespace
// at path, so that the child is born in it. The thread goes back to its
// namespace afterwards, or, if that fails, dies with its goroutine.
func startInNetNS(path string, cmd *exec.Cmd) error {
	if path == "" {
		return cmd.Start()
	}
	return netnsdo.Do(path, cmd.Start)
}
