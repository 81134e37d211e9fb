package podproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// BinaryName is the pod process's executable.
const BinaryName = "berth-podproc"

// StartOptions start one pod process.
type StartOptions struct {
	Binary string
	PodID  string
	Socket string
	// Log receives the process's own messages (stderr); nil discards them.
	Log *os.File
	// Spawn is the spawn helper (berth-spawn) and Root libcontainer's
	// state root; without them the process refuses CREATE, EXEC and
	// UPDATE. Systemd is the systemd cgroup driver.
	Spawn, Root string
	Systemd     bool
	// Env is the process's environment, which the helper inherits
	// (fault points in tests); empty by default.
	Env []string
}

// readyFD is where the process reports "ok" once it serves its socket.
const readyFD = 3

// Start runs a pod process in a session of its own, so that it outlives
// berth, and returns once it serves its socket. The caller reaps the
// process (Wait) once it has exited.
func Start(ctx context.Context, o StartOptions) (*os.Process, error) {
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer syncR.Close()
	args := []string{"--socket", o.Socket, "--pod", o.PodID, "--ready-fd", fmt.Sprint(readyFD)}
	if o.Spawn != "" {
		args = append(args, "--spawn", o.Spawn, "--root", o.Root)
		if o.Systemd {
			args = append(args, "--systemd", "1")
		}
	}
	cmd := exec.Command(o.Binary, args...)
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	}
	cmd.ExtraFiles = []*os.File{syncW}
	cmd.Dir = "/"
	cmd.Env = append([]string{}, o.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	syncW.Close()
	if err != nil {
		return nil, fmt.Errorf("pod %s: start %s: %w", o.PodID, o.Binary, err)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	syncR.SetReadDeadline(dl)
	msg, err := io.ReadAll(io.LimitReader(syncR, 4096))
	if err == nil && string(msg) != "ok" {
		err = errors.New(strings.TrimSpace(string(msg)))
		if len(msg) == 0 {
			err = errors.New("the pod process exited during start-up")
		}
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("pod %s: start pod process: %w", o.PodID, err)
	}
	return cmd.Process, nil
}
