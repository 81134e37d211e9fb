package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/container/apparmor"
	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/events"
	"github.com/berth-runtime/berth/internal/faultpoint"
	podprocs "github.com/berth-runtime/berth/monitor/pods"
	"github.com/berth-runtime/berth/nri"
	"github.com/berth-runtime/berth/sandbox"
)

// newContainers builds the container service on top of the pod and image
// services. It reattaches to the monitors of the previous run before it
// returns.
func newContainers(ctx context.Context, cfg *config.Config, pods container.Pods, procs *podprocs.Set, images *image.Service, bus *events.Bus, n *nri.NRI, log *slog.Logger, faults *faultpoint.Point, tracer trace.Tracer) (*container.Service, error) {
	// The default profile is loaded now; a container loads it again if
	// someone removed it since.
	aa := apparmor.New(cfg.State, apparmor.SystemPaths, log)
	if _, err := aa.EnsureDefault(ctx); err != nil && aa.Usable() == nil {
		return nil, err
	}
	return container.New(ctx, container.Options{
		Host:         spec.SystemHost{AppArmorSystem: aa},
		Tracer:       tracer,
		Root:         cfg.Root,
		State:        cfg.State,
		Pods:         pods,
		PodProcesses: procs,
		Images:       imagesAdapter{images},
		// Validated by the config (cgroupfs or systemd).
		CgroupDriver: cgroup.Driver(cfg.CgroupDriver),
		Logger:       log,
		Events:       bus,
		NRI:          n,
		Faults:       faults,
		CDI:          newCDI(cfg, log),
	})
}

// newPodProcesses is the pods' own processes, of the kind pod_process
// names for new pods.
func newPodProcesses(cfg *config.Config, log *slog.Logger) *podprocs.Set {
	return podprocs.New(podprocs.Options{
		State: cfg.State, RuncRoot: filepath.Join(cfg.State, "runc"),
		CgroupDriver: cgroup.Driver(cfg.CgroupDriver), Kind: cfg.PodProcess, Logger: log,
	})
}

// newCDI is the node's CDI registry, nil when enable_cdi is off.
func newCDI(cfg *config.Config, log *slog.Logger) spec.CDI {
	if !cfg.EnableCDI {
		return nil
	}
	r := spec.NewCDIRegistry(cfg.CDISpecDirs, log)
	log.Info("CDI devices enabled", "spec_dirs", r.Dirs())
	return r
}

// latePods lets the container service, built first, reach the sandbox
// service built after it. It hands the container service each pod's
// runtime handler settings from cfg.
type latePods struct {
	m   atomic.Pointer[sandbox.Manager]
	cfg *config.Config
}

func (l *latePods) set(m *sandbox.Manager) { l.m.Store(m) }

func (l *latePods) Pod(ctx context.Context, id string) (*container.Pod, error) {
	m := l.m.Load()
	if m == nil {
		return nil, fmt.Errorf("%w: pod sandbox %s (pods not loaded yet)", container.ErrNotFound, id)
	}
	// The sandbox service's errors carry their errdefs class, as the
	// container service's do: they go to the server as they are.
	info, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	rt, ok := l.cfg.Handler(info.RuntimeHandler)
	if !ok {
		// Configured when the pod was made, gone from the config since.
		return nil, fmt.Errorf("%w: pod sandbox %s: its runtime handler %q is no longer configured", container.ErrState, id, info.RuntimeHandler)
	}
	return &container.Pod{
		Ready: info.State == sandbox.StateReady,
		Pod: spec.Pod{
			ID: info.ID, Config: info.Config, NetNSPath: info.NetNS, PausePID: info.PausePid,
			// Pause has the pod's leaf cgroup; containers are its siblings
			// under the parent the kubelet gave, as with containerd.
			CgroupParent: info.CgroupParent,
			HostnamePath: info.Hostname, HostsPath: info.Hosts, ResolvConfPath: info.Resolv, ShmPath: info.Shm,
			Runtime: podRuntime(info.RuntimeHandler, rt),
		},
	}, nil
}

// podRuntime is a handler's settings as the container specs use them.
func podRuntime(handler string, rt config.Runtime) spec.Runtime {
	out := spec.Runtime{
		Handler:                      handler,
		PrivilegedWithoutHostDevices: rt.PrivilegedWithoutHostDevices,
		NoRecursiveReadOnly:          rt.DisableRecursiveReadOnly,
	}
	if len(rt.DefaultAnnotations) > 0 {
		out.Annotations = make(map[string]string, len(rt.DefaultAnnotations))
		for _, kv := range rt.DefaultAnnotations {
			k, v, _ := strings.Cut(kv, "=") // the config checked the form
			out.Annotations[k] = v
		}
	}
	return out
}

type imagesAdapter struct{ s *image.Service }

func (a imagesAdapter) Lease(ctx context.Context, holder, name string) (*container.Image, error) {
	img, err := a.s.Lease(ctx, holder, name)
	if err != nil {
		return nil, err
	}
	return &container.Image{ID: img.ID, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, LowerDirs: img.LowerDirs(), Config: img.Config}, nil
}

func (a imagesAdapter) Release(ctx context.Context, holder string) error {
	return a.s.Release(ctx, holder)
}
func (a imagesAdapter) Holders() []string { return a.s.Holders() }

func (a imagesAdapter) Pull(ctx context.Context, name string) error {
	_, err := a.s.Pull(ctx, name, nil)
	return err
}
