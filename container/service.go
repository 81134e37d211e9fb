// Package container is berth's container lifecycle: CRI requests become an
// overlay root filesystem, an OCI runtime spec (package spec) and calls to
// the pod's monitor (package monitor), which owns the processes. Every
// query is answered from memory; records are written on change.
package container

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/errdefs"
	"github.com/berth-runtime/berth/internal/events"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/fsguard"
	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/internal/store"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/monitor/pods"
	"github.com/berth-runtime/berth/nri"
)

// Errors of the container service, each of an errdefs class; returned
// errors wrap one of them with the container or pod they concern.
var (
	ErrNotFound     = errdefs.New("not found", errdefs.ErrNotFound)
	ErrInvalid      = errdefs.New("invalid argument", errdefs.ErrInvalidArgument)
	ErrNameReserved = reserve.ErrTaken
	// ErrState: the container is not in a state that allows the call.
	ErrState   = errdefs.New("failed precondition", errdefs.ErrFailedPrecondition)
	ErrTimeout = errdefs.New("timed out", errdefs.ErrDeadlineExceeded)
)

// Pod is what the container service needs to know about a pod sandbox.
type Pod struct {
	spec.Pod
	Ready bool
}

// Pods looks up pod sandboxes; a missing pod's error is of class
// errdefs.ErrNotFound.
type Pods interface {
	Pod(ctx context.Context, id string) (*Pod, error)
}

// Image is a stored image as a container uses it.
type Image struct {
	ID          string
	RepoTags    []string
	RepoDigests []string
	// LowerDirs are the unpacked layers, top first (overlay's order).
	LowerDirs []string
	Config    []byte // image config JSON
}

// Images leases images: a leased image's layers stay on disk until
// Release, whatever happens to the image. A missing image's error is of
// class errdefs.ErrNotFound, an invalid reference's of
// errdefs.ErrInvalidArgument.
type Images interface {
	Lease(ctx context.Context, holder, name string) (*Image, error)
	Release(ctx context.Context, holder string) error
	Holders() []string
	// Pull fetches an image (through the configured mirrors): the pod's
	// sandbox image is pulled when it is missing.
	Pull(ctx context.Context, name string) error
}

// Options configure a Service.
type Options struct {
	Root   string // persistent root: writable layers
	State  string // volatile root: records, specs, rootfs mounts, monitors
	Pods   Pods
	Images Images
	// PodProcesses are the pods' own processes, which the sandbox
	// service starts, adopts and stops: each container is made and
	// watched through its pod's. Nil: a Set of its own on State, for
	// tests.
	PodProcesses *pods.Set
	// CgroupDriver makes the containers' cgroups (in their monitors);
	// empty is cgroupfs.
	CgroupDriver cgroup.Driver
	Host         spec.Host // default spec.SystemHost
	Logger       *slog.Logger
	// Events gets the containers' lifecycle events; nil drops them.
	Events *events.Bus
	// NRI relays the containers' lifecycle to NRI plugins (nri.go); nil
	// is no NRI.
	NRI *nri.NRI
	// Faults hangs a call at a named step for crash tests; nil in
	// production.
	Faults *faultpoint.Point
	// CDI gives containers the CDI devices their configs name; nil is
	// CDI turned off: the names are ignored.
	CDI spec.CDI
	// Tracer makes the spans of a container's steps (rootfs, monitor,
	// libcontainer); nil makes none.
	Tracer trace.Tracer
	// CreateTimeout bounds one CreateContainer, which goes on after its
	// caller gave up so that a retry finds the container (default 4m, the
	// kubelet's runtime request timeout is 2m).
	CreateTimeout time.Duration
}

// Service runs containers.
type Service struct {
	opts    Options
	log     *slog.Logger
	host    spec.Host
	records *store.Records[Record]
	dir     string // <state>/containers
	upper   string // <root>/containers
	runc    string // <state>/runc, libcontainer's root
	// checkpoints (<root>/checkpoints) holds each checkpoint's work
	// directory while it is made: CRIU's images are as large as the
	// container's memory, too large for the state tmpfs.
	checkpoints string
	criu        criuProbe
	// resets holds back the loopback resets of pods whose containers
	// wait for the restore of established TCP connections.
	resets resetHolds
	// fs runs the removals and unmounts that a filesystem that stopped
	// answering could hold forever.
	fs *fsguard.Guard

	ctx    context.Context // ends with Close: stops the exit watchers
	cancel context.CancelFunc

	mu   sync.RWMutex
	ctrs map[string]*ctr
	// names are the containers' names (pod, name, attempt), held while
	// each exists: internal/reserve.
	names *reserve.Names
	// loaded is what New loaded for Recover; nil after.
	loaded *loaded
}

// New loads the containers of a previous run; Recover, once the pods'
// own processes are adopted, reattaches to them (see recover.go).
func New(ctx context.Context, opts Options) (*Service, error) {
	if opts.Root == "" || opts.State == "" || opts.Pods == nil || opts.Images == nil {
		return nil, errors.New("container: Root, State, Pods and Images are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Host == nil {
		opts.Host = spec.SystemHost{}
	}
	opts.Tracer = tracing.OrOff(opts.Tracer)
	if opts.PodProcesses == nil {
		opts.PodProcesses = pods.New(pods.Options{State: opts.State, RuncRoot: filepath.Join(opts.State, "runc"), CgroupDriver: opts.CgroupDriver, Logger: opts.Logger})
	}
	s := &Service{
		opts:  opts,
		log:   opts.Logger.With("component", "container"),
		host:  opts.Host,
		dir:   filepath.Join(opts.State, "containers"),
		upper: filepath.Join(opts.Root, "containers"),
		runc:  filepath.Join(opts.State, "runc"),
		ctrs:  map[string]*ctr{},

		checkpoints: filepath.Join(opts.Root, "checkpoints"),
	}
	s.fs = fsguard.New(s.log, 0)
	for _, d := range []string{s.dir, s.runc} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
	}
	// The writable layers are the kernel's business (overlay reaches them
	// as the mounter, root), and a host user who could search them could
	// read and write every container's files: root's only, also when an
	// older berth made the dir searchable.
	for _, d := range []string{s.upper, s.checkpoints} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
	}
	if err := os.Chmod(s.upper, 0o700); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	s.sweepCheckpoints()
	var err error
	// Containers do not survive a reboot: their records need no fsync
	// (as the pods' records, see store.Volatile).
	if s.records, err = store.Open[Record](filepath.Join(opts.State, "container-records"), store.Volatile); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	s.names = reserve.New(reserve.Options{Kind: "container", Timeout: opts.CreateTimeout, Refuse: true, Logger: s.log})
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.load(); err != nil {
		s.cancel()
		return nil, err
	}
	return s, nil
}

// Recover reattaches to the containers New loaded, through their pods'
// processes, which the sandbox service has adopted by then: exits
// recorded while berth was away are picked up, running containers
// watched again. Called once, before the service is used.
func (s *Service) Recover(ctx context.Context) error {
	s.recover(ctx)
	s.watchSystemdReloads()
	return nil
}

// Close stops watching exits. Containers and monitors keep running.
func (s *Service) Close() { s.cancel() }

// podProc is the client of the pod's own process.
func (s *Service) podProc(podID string) pods.Client { return s.opts.PodProcesses.Client(podID) }

// lookup finds a container by id or unique id prefix. A prefix that
// begins several containers' ids is an error naming them, not
// ErrNotFound: the container asked for may exist, so Stop and Remove must
// not answer that it is gone.
func (s *Service) lookup(id string) (*ctr, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty container id", ErrNotFound)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c, ok := s.ctrs[id]; ok && !c.rec.Sandbox {
		return c, nil
	}
	_, c, err := idindex.Find(s.workloads(), id)
	if errors.Is(err, idindex.ErrNotFound) {
		return nil, fmt.Errorf("%w: container %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("container %w", err)
	}
	return c, nil
}

// workloads are the containers CRI names, without pods' infra
// containers. The caller holds s.mu.
func (s *Service) workloads() iter.Seq2[string, *ctr] {
	return func(yield func(string, *ctr) bool) {
		for id, c := range s.ctrs {
			if !c.rec.Sandbox && !yield(id, c) {
				return
			}
		}
	}
}

func nameKey(podID string, md *runtimeapi.ContainerMetadata) string {
	return fmt.Sprintf("%s/%s/%d", podID, md.GetName(), md.GetAttempt())
}
