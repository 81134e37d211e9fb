package container

import (
	"context"
	"time"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/fsguard"
)

// hostPathWait bounds each look at a path the container's config names
// (a hostPath volume, a device). A create runs on after its caller gave up
// (for the kubelet's retry to find), so without a bound a volume on a
// filesystem that stopped answering would hold the create, and its name,
// until the filesystem came back; with it the create fails naming the
// path, is undone, and the kubelet's next try asks again.
const hostPathWait = 30 * time.Second

// guardedHost is the spec builder's Host for one create: its first look
// at each mount source (a stat, before the propagation is read and before
// libcontainer binds it) goes through the service's fsguard. The lookups
// after it find the path answering; device paths are under /dev.
type guardedHost struct {
	spec.Host
	ctx context.Context
	fs  *fsguard.Guard
}

func (s *Service) guardedHost(ctx context.Context) spec.Host {
	return guardedHost{Host: s.host, ctx: ctx, fs: s.fs}
}

// MountSource implements spec.Host.
func (h guardedHost) MountSource(path string) error {
	wait := min(h.fs.Budget(h.ctx), hostPathWait)
	return h.fs.DoWithin(h.ctx, wait, "stat", path, func(func(string)) error { return h.Host.MountSource(path) })
}
