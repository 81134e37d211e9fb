package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/sandbox"
)

// monitorPause is berth's pause runtime: each pod's monitor, started with
// the pod, starts pause as its child (the built-in pause by a plain
// clone, or the configured pause image as the pod's infra container), so
// that pause survives berth and its exit is recorded like a container's.
// Berth watches pause by pidfd all the same.
type monitorPause struct {
	containers *container.Service
	image      string // pause_image; empty: built in
}

func (r *monitorPause) Start(ctx context.Context, s *sandbox.PauseSpec) (*sandbox.Process, error) {
	ps := &container.PauseSpec{
		Pod: spec.Pod{
			ID: s.PodID, Config: s.Config, NetNSPath: s.NetNS,
			// The infra container's cgroup is the child of the pod's
			// parent named by its id, the pod's: pause's.
			CgroupParent: s.Cgroup.Parent(),
		},
		Image:  r.image,
		NewIPC: s.NewIPC, NewUTS: s.NewUTS, NewPID: s.NewPID,
		Cgroup: s.Cgroup.SpecPath(), CgroupPaths: s.CgroupPaths,
		UserNS: container.MonitorUserNS(s.UserNS),
	}
	if r.image == "" {
		var err error
		if ps.Args, ps.Env, err = sandbox.PauseCommand(s, nil); err != nil {
			return nil, err
		}
	}
	pid, err := r.containers.StartPause(ctx, ps)
	if err != nil {
		return nil, err
	}
	proc, err := sandbox.OpenProcess(pid, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("pod %s: watch pause: %w", s.PodID, err)
	}
	return proc, nil
}

func (r *monitorPause) Adopt(ctx context.Context, podID string, pid int, start uint64) (*sandbox.Process, error) {
	if err := r.containers.AdoptPause(ctx, podID, pid, start); err != nil {
		if errors.Is(err, container.ErrPauseGone) {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrProcessGone, err)
		}
		return nil, err
	}
	return sandbox.OpenProcess(pid, start, nil)
}

func (r *monitorPause) Stopped(ctx context.Context, podID string) error {
	return r.containers.StopPod(ctx, podID)
}

func (r *monitorPause) Removed(ctx context.Context, podID string) error {
	return r.containers.RemovePod(ctx, podID)
}
