package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"go.opentelemetry.io/otel/trace"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/events"
	"github.com/berth-runtime/berth/internal/faultpoint"
	podprocs "github.com/berth-runtime/berth/monitor/pods"
	"github.com/berth-runtime/berth/network"
	"github.com/berth-runtime/berth/nri"
	"github.com/berth-runtime/berth/sandbox"
)

// newPods builds pod networking (libcni, watching the conf dir for
// NetworkReady) and the sandbox service, which reloads and reconciles the
// pods of the previous run before it returns.
func newPods(ctx context.Context, cfg *config.Config, log *slog.Logger, containers *container.Service, procs *podprocs.Set, bus *events.Bus, n *nri.NRI, faults *faultpoint.Point, tracer trace.Tracer) (*network.CNI, *sandbox.Manager, error) {
	netCfg := network.Config{
		ConfDir: cfg.CNI.ConfDir,
		BinDirs: cfg.CNI.BinDirs,
		// On the persistent root: after a reboot it is what tells GC which
		// attachments the pods that are gone held, so that an IPAM keeping
		// its leases on disk (host-local's /var/lib/cni/networks) gets
		// their IPs back.
		CacheDir: filepath.Join(cfg.Root, "cni"),
	}
	if cfg.CNI.DefaultNetwork {
		// Leases live beside the pods they belong to: on the volatile
		// state root, gone at reboot with the pods themselves.
		netCfg.Default = &network.DefaultNetwork{
			Bridge:        cfg.CNI.DefaultBridge,
			Subnet:        cfg.CNI.DefaultSubnet,
			FollowPodCIDR: cfg.CNI.DefaultPodCIDR,
			NoMasquerade:  !cfg.CNI.DefaultMasquerade,
			DataDir:       filepath.Join(cfg.State, "cni", "networks"),
		}
	}
	cni, err := network.NewCNI(netCfg, log)
	if err != nil {
		return nil, nil, err
	}
	pods, err := sandbox.New(ctx, sandbox.Options{
		StateDir:     cfg.State,
		Network:      cni,
		CgroupDriver: cfg.CgroupDriver,
		// Each pod's own process runs its pause and lives as long as it.
		Pause:      &sandbox.PodPause{Procs: procs, Containers: containers, Image: cfg.PauseImage, Tracer: tracer, Faults: faults},
		Containers: containers,
		Logger:     log,
		Events:     bus,
		NRI:        n,
		Faults:     faults,
		Tracer:     tracer,
	})
	if err != nil {
		return nil, nil, err
	}
	return cni, pods, nil
}
