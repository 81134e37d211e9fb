package monitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/internal/faultpoint"
)

// BinaryName is the monitor's executable, installed next to berth.
const BinaryName = "berth-monitor"

// FindBinary looks for the monitor next to the running berth binary, then
// on PATH.
func FindBinary() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), BinaryName)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(BinaryName)
	if err != nil {
		return "", fmt.Errorf("find %s next to berth or on PATH: %w", BinaryName, err)
	}
	return p, nil
}

// Paths are where one pod's monitor keeps its socket and log.
type Paths struct {
	Dir    string // <state>/monitors/<pod>
	Socket string
	Log    string
}

// PathsFor lays out a pod's monitor files under the state root. The
// socket's name is short, outside the pod's dir: a unix socket path must
// fit in 108 bytes, and a pod id alone takes 64.
func PathsFor(stateRoot, podID string) Paths {
	dir := filepath.Join(stateRoot, "monitors", podID)
	short := podID
	if len(short) > 16 {
		short = short[:16]
	}
	return Paths{Dir: dir, Socket: filepath.Join(stateRoot, "monitors", short+".sock"), Log: filepath.Join(dir, "monitor.log")}
}

// StartOptions start one monitor.
type StartOptions struct {
	Binary string
	PodID  string
	Paths  Paths
	// RuncRoot is libcontainer's state root, shared by all monitors.
	RuncRoot string
	// CgroupDriver makes the pod's cgroups (internal/cgroup); empty is
	// cgroupfs.
	CgroupDriver string
}

// Start runs a monitor in its own session, so that it survives berth, and
// returns when it serves its socket. The caller reaps the returned process
// (Wait) once it has exited; after a berth restart init does.
func Start(ctx context.Context, o StartOptions) (*os.Process, error) {
	if err := os.MkdirAll(o.Paths.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("pod %s: monitor dir: %w", o.PodID, err)
	}
	logf, err := os.OpenFile(o.Paths.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pod %s: monitor log: %w", o.PodID, err)
	}
	defer logf.Close()
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer syncR.Close()
	args := []string{"--pod", o.PodID, "--socket", o.Paths.Socket, "--root", o.RuncRoot}
	if o.CgroupDriver != "" {
		args = append(args, "--cgroup-driver", o.CgroupDriver)
	}
	cmd := exec.Command(o.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{syncW} // fd 3
	cmd.Dir = "/"
	// One P is plenty for a process that mostly copies pipes, and keeps
	// its threads and memory down.
	cmd.Env = []string{"GOMAXPROCS=1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	// The spawn helper's crash points are armed in berth's environment,
	// as berth's own are; the monitor hands them on to its helpers.
	if p := os.Getenv(faultpoint.EnvPoint); strings.HasPrefix(p, "spawn-") {
		for _, k := range []string{faultpoint.EnvPoint, faultpoint.EnvFile, faultpoint.EnvDelay} {
			if v, ok := os.LookupEnv(k); ok {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	syncW.Close()
	if err != nil {
		return nil, fmt.Errorf("pod %s: start monitor: %w", o.PodID, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		syncR.SetReadDeadline(dl)
	} else {
		syncR.SetReadDeadline(time.Now().Add(30 * time.Second))
	}
	msg, err := io.ReadAll(io.LimitReader(syncR, 4096))
	if err == nil && string(msg) != "ok" {
		err = errors.New(strings.TrimSpace(string(msg)))
		if len(msg) == 0 {
			err = fmt.Errorf("monitor exited during start-up (see %s)", o.Paths.Log)
		}
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("pod %s: start monitor: %w", o.PodID, err)
	}
	return cmd.Process, nil
}
