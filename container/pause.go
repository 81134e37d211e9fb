package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/monitor"
)

// ErrPauseGone is returned by AdoptPause when the pod's pause is not
// running under its monitor any more.
var ErrPauseGone = errors.New("pause is gone")

// PauseSpec is a pod's pause process, as the sandbox service asks for it.
type PauseSpec struct {
	// Pod is the pod being made: ID, Config, NetNSPath (empty on the
	// host's network) and CgroupParent, the parent of the pod's own cgroup.
	Pod spec.Pod
	// Image, when set, runs pause from that image (pulled if missing) as
	// the pod's infra container, in the pod's own cgroup. Else the
	// built-in pause runs with the fields below.
	Image string
	// Args and Env run the built-in pause (sync pipe on fd 3).
	Args, Env []string
	// New namespaces of the built-in pause.
	NewIPC, NewUTS, NewPID bool
	// Cgroup is the pod cgroup the built-in pause is moved into, as an
	// OCI cgroupsPath, prepared: CgroupPaths are its directories by
	// hierarchy (cgroup.Manager.Prepare).
	Cgroup      string
	CgroupPaths map[string]string
	// UserNS clones the built-in pause into a new user namespace, and a
	// network namespace it owns (Pod.NetNSPath is then empty).
	UserNS *monitor.UserNS
}

// StartPause starts the pod's monitor, then pause as its child, and
// returns pause's pid once it runs. On error the caller undoes the pod
// with StopPod and RemovePod.
func (s *Service) StartPause(ctx context.Context, ps *PauseSpec) (int, error) {
	podID := ps.Pod.ID
	_, span := s.opts.Tracer.Start(ctx, "monitor start")
	m, err := s.startMonitor(ctx, podID)
	tracing.End(span, err)
	if err != nil {
		return 0, err
	}
	s.opts.Faults.Hit(faultpoint.RunMonitorStarted, podID)
	var pid int
	if ps.Image != "" && ps.UserNS != nil {
		err = fmt.Errorf("%w: pod %s: user namespaces need the built-in pause (pause_image is set)", ErrInvalid, podID)
	} else if ps.Image != "" {
		pid, err = s.startPauseContainer(ctx, ps)
	} else {
		_, span := s.opts.Tracer.Start(ctx, "pause run")
		pid, err = m.client.RunPause(ctx, podID, &monitor.PauseRequest{
			Args: ps.Args, Env: ps.Env, NetNS: ps.Pod.NetNSPath,
			NewIPC: ps.NewIPC, NewUTS: ps.NewUTS, NewPID: ps.NewPID, UserNS: ps.UserNS,
			Cgroup: ps.Cgroup, CgroupPaths: ps.CgroupPaths, Dir: m.paths.Dir,
		})
		tracing.End(span, err)
	}
	if err != nil {
		return 0, fmt.Errorf("pod %s: start pause: %w", podID, err)
	}
	m.mu.Lock()
	m.pausePid, m.pauseStart = pid, processStart(pid)
	m.mu.Unlock()
	return pid, nil
}

// startPauseContainer runs pause from an image as the pod's infra
// container: created and started through the monitor like any container,
// with the pod's id as its own.
func (s *Service) startPauseContainer(ctx context.Context, ps *PauseSpec) (int, error) {
	id := ps.Pod.ID
	podCfg := ps.Pod.Config
	psc := podCfg.GetLinux().GetSecurityContext()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "POD"},
		Image:    &runtimeapi.ImageSpec{Image: ps.Image},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			Privileged:       psc.GetPrivileged(),
			NamespaceOptions: psc.GetNamespaceOptions(),
			SelinuxOptions:   psc.GetSelinuxOptions(),
			RunAsUser:        psc.GetRunAsUser(),
			RunAsGroup:       psc.GetRunAsGroup(),
			ReadonlyRootfs:   psc.GetReadonlyRootfs(),
			Seccomp:          psc.GetSeccomp(),
		}},
	}
	c, err := s.create(ctx, id, ps.Pod, cfg, podCfg, true)
	if err != nil {
		return 0, err
	}
	if err := s.start(ctx, c); err != nil {
		return 0, err
	}
	return c.snapshot().Pid, nil
}

// AdoptPause reattaches, after a berth restart, to the pause of a pod
// through its monitor. The monitor must still run and report pause, with
// the pid and start time berth recorded, as running; otherwise a pause
// left without its monitor is killed (no one would record its exit) and
// the error wraps ErrPauseGone.
func (s *Service) AdoptPause(ctx context.Context, podID string, pid int, start uint64) error {
	s.monMu.Lock()
	silent := s.silent[podID]
	delete(s.silent, podID)
	s.monMu.Unlock()
	if silent {
		// Its monitor stayed silent for the containers a moment ago:
		// waiting for it once more would only double the pod's delay.
		return fmt.Errorf("pod %s: its monitor did not answer the containers' recovery: %w", podID, context.DeadlineExceeded)
	}
	m := s.newMonitor(podID)
	gone := func(why string) error {
		if pid > 0 && processStart(pid) == start {
			s.log.Warn("killing pause left without its monitor", "pod", podID, "pid", pid)
			killPid(pid)
		}
		return fmt.Errorf("pod %s: %w: %s", podID, ErrPauseGone, why)
	}
	pingPid, err := m.client.Ping(ctx)
	if ctx.Err() != nil {
		// Alive but not answering (stopped, wedged): not a reason to
		// kill its pause.
		return fmt.Errorf("pod %s: its monitor does not answer: %w", podID, ctx.Err())
	}
	if errors.Is(err, monitor.ErrVersion) {
		// Alive, and pause with it, in a protocol this berth does not
		// speak: kept, not killed.
		return fmt.Errorf("pod %s: %w", podID, err)
	}
	if err != nil {
		return gone("its monitor is gone")
	}
	st, err := m.client.Status(ctx, podID)
	switch {
	case err != nil && !errors.Is(err, monitor.ErrUnreachable) && !monitor.IsCode(err, monitor.CodeNotFound):
		return fmt.Errorf("pod %s: pause status: %w", podID, err)
	case err != nil:
		return gone("its monitor does not know it")
	case st.State != monitor.StateRunning || st.Pid != pid || processStart(pid) != start:
		return fmt.Errorf("pod %s: %w: exited", podID, ErrPauseGone)
	}
	if err := s.watchMonitor(podID, m, pingPid, nil); err != nil {
		return err
	}
	m.pausePid, m.pauseStart = pid, start
	s.monMu.Lock()
	s.monitors[podID] = m
	s.monMu.Unlock()
	return nil
}

// StopPod is called once a pod's containers and pause have been stopped:
// the pod's monitor records the last exits and exits itself. Stopping a
// pod without a monitor succeeds.
func (s *Service) StopPod(ctx context.Context, podID string) error {
	return s.stopMonitor(ctx, podID)
}

// RemovePod forgets a stopped pod: its infra container (rootfs, image
// lease, record), its monitor's socket and directory.
func (s *Service) RemovePod(ctx context.Context, podID string) error {
	if err := s.stopMonitor(ctx, podID); err != nil {
		return err
	}
	s.mu.RLock()
	infra := s.ctrs[podID]
	s.mu.RUnlock()
	if infra != nil && infra.rec.Sandbox {
		rec := infra.snapshot()
		if err := s.release(ctx, &rec); err != nil {
			return err
		}
		s.mu.Lock()
		delete(s.ctrs, podID)
		s.mu.Unlock()
	}
	s.monMu.Lock()
	m := s.monitors[podID]
	delete(s.monitors, podID)
	s.monMu.Unlock()
	paths := monitor.PathsFor(s.opts.State, podID)
	if m != nil {
		paths = m.paths
	}
	if err := os.Remove(paths.Socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("pod %s: remove monitor socket: %w", podID, err)
	}
	if err := os.RemoveAll(paths.Dir); err != nil {
		return fmt.Errorf("pod %s: remove monitor dir: %w", podID, err)
	}
	return nil
}

// killPid SIGKILLs pid through a pidfd and waits (a little) for its exit
// notification, so that the caller goes on once the kernel took it down.
func killPid(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
		return
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(killWait/time.Millisecond))
}

const killWait = 5 * time.Second
