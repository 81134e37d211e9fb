package sandbox

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/pods"
)

// InfraContainers run a pod's pause from an image (pause_image), as the
// pod's infra container, through the pod's own process like any
// container: the container service.
type InfraContainers interface {
	Containers
	StartInfra(ctx context.Context, podID string, cfg *runtimeapi.PodSandboxConfig, netns string, cgroupParent cgroup.Parent, image string) (int, error)
	RemoveInfra(ctx context.Context, podID string) error
}

// PodPause is berth's pause runtime: the pod's own process (pods.Set, the
// Go monitor or the C pod process), started first, runs pause as its
// child (the built-in pause by a plain clone, or the pause image as the
// pod's infra container), so that pause survives berth and its exit is
// recorded like a container's. Berth watches pause by pidfd all the
// same. The pod's process lives as long as the pod: adopted after a
// restart, stopped once pause and the containers are, removed with it.
type PodPause struct {
	Procs      *pods.Set
	Containers InfraContainers
	// Image is pause_image; empty runs the built-in pause.
	Image  string
	Tracer trace.Tracer
	Faults *faultpoint.Point
}

// Start implements PauseRuntime.
func (r *PodPause) Start(ctx context.Context, s *PauseSpec) (*Process, error) {
	if r.Image != "" && s.UserNS != nil {
		return nil, fmt.Errorf("%w: pod %s: user namespaces need the built-in pause (pause_image is set)", ErrInvalid, s.PodID)
	}
	tracer := tracing.OrOff(r.Tracer)
	_, span := tracer.Start(ctx, "monitor start")
	_, err := r.Procs.Start(ctx, s.PodID)
	tracing.End(span, err)
	if err != nil {
		return nil, err
	}
	r.Faults.Hit(faultpoint.RunMonitorStarted, s.PodID)
	var pid int
	if r.Image != "" {
		// The infra container's cgroup is the child of the pod's parent
		// named by its id, the pod's: pause's.
		if pid, err = r.Containers.StartInfra(ctx, s.PodID, s.Config, s.NetNS, s.Cgroup.Parent(), r.Image); err == nil {
			r.Procs.PauseStarted(s.PodID, pid)
		}
	} else {
		pid, err = r.runPause(ctx, tracer, s)
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s: start pause: %w", s.PodID, err)
	}
	proc, err := OpenProcess(pid, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("pod %s: watch pause: %w", s.PodID, err)
	}
	return proc, nil
}

// runPause has the pod's process run the built-in pause.
func (r *PodPause) runPause(ctx context.Context, tracer trace.Tracer, s *PauseSpec) (int, error) {
	args, env, err := PauseCommand(s, nil)
	if err != nil {
		return 0, err
	}
	_, span := tracer.Start(ctx, "pause run")
	pid, err := r.Procs.RunPause(ctx, s.PodID, &monitor.PauseRequest{
		Args: args, Env: env, NetNS: s.NetNS,
		NewIPC: s.NewIPC, NewUTS: s.NewUTS, NewPID: s.NewPID, UserNS: monitorUserNS(s.UserNS),
		HostNetwork: s.HostNetwork,
		Cgroup:      s.Cgroup.SpecPath(), CgroupPaths: s.CgroupPaths,
	})
	tracing.End(span, err)
	return pid, err
}

// monitorUserNS is u (a pod's, mode POD) as the pod's process takes it;
// nil for none. (No options at all is the node's user namespace,
// although the zero mode is POD.)
func monitorUserNS(u *runtimeapi.UserNamespace) *monitor.UserNS {
	if u == nil || u.GetMode() != runtimeapi.NamespaceMode_POD {
		return nil
	}
	conv := func(in []*runtimeapi.IDMapping) []monitor.IDMap {
		out := make([]monitor.IDMap, 0, len(in))
		for _, m := range in {
			out = append(out, monitor.IDMap{ContainerID: m.GetContainerId(), HostID: m.GetHostId(), Size: m.GetLength()})
		}
		return out
	}
	return &monitor.UserNS{UIDs: conv(u.GetUids()), GIDs: conv(u.GetGids())}
}

// Adopt implements PauseRuntime: the pod's process first, then pause
// through it.
func (r *PodPause) Adopt(ctx context.Context, podID string, pid int, start uint64) (*Process, error) {
	if err := r.Procs.Adopt(ctx, podID, pid, start); err != nil {
		if errors.Is(err, pods.ErrPauseGone) {
			return nil, fmt.Errorf("%w: %w", ErrProcessGone, err)
		}
		return nil, err
	}
	return OpenProcess(pid, start, nil)
}

// Stopped implements PauseRuntime: the pod's process records the last
// exits and exits itself.
func (r *PodPause) Stopped(ctx context.Context, podID string) error {
	return r.Procs.Stop(ctx, podID, func(ctx context.Context) error { return r.Containers.StopPodContainers(ctx, podID) })
}

// Removed implements PauseRuntime: the infra container, if any, and the
// pod's process's socket and dir.
func (r *PodPause) Removed(ctx context.Context, podID string) error {
	if err := r.Stopped(ctx, podID); err != nil {
		return err
	}
	if err := r.Containers.RemoveInfra(ctx, podID); err != nil {
		return err
	}
	return r.Procs.Remove(podID)
}
