package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/events"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/internal/store"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/network"
	"github.com/berth-runtime/berth/nri"
)

// Network is the CNI side of a pod, as network.CNI implements it.
type Network interface {
	Setup(ctx context.Context, pod *network.Pod) (*network.Result, error)
	Teardown(ctx context.Context, pod *network.Pod) error
	GC(ctx context.Context, keep map[string]bool) ([]string, error)
	SetPodCIDRs(cidrs []string) error
}

// Containers lets the container service stop and remove a pod's
// containers before the pod itself goes. Optional until containers exist.
type Containers interface {
	StopPodContainers(ctx context.Context, podID string) error
	RemovePodContainers(ctx context.Context, podID string) error
}

// Options configure a Manager.
type Options struct {
	// StateDir is the volatile state root: records and per-pod files go
	// to StateDir/sandboxes, netns pins to StateDir/netns.
	StateDir string
	Network  Network
	Pause    PauseRuntime // default: DirectPause
	// CgroupDriver is cgroupfs or systemd (see internal/cgroup);
	// DefaultCgroupParent is used when the pod names none (default /berth,
	// or berth.slice).
	CgroupDriver        string
	DefaultCgroupParent string
	// StopGrace is how long pause gets after SIGTERM (default 2s; it
	// exits at once unless something is badly wrong).
	StopGrace time.Duration
	// RunTimeout bounds one RunPodSandbox, which goes on after its caller
	// gave up so that a retry finds the pod (default 4m, the kubelet's
	// runtime request timeout is 2m).
	RunTimeout time.Duration
	Containers Containers
	Logger     *slog.Logger
	// Events gets the pods' lifecycle events; nil drops them.
	Events *events.Bus
	// NRI relays the pods' lifecycle to NRI plugins; nil is no NRI.
	NRI *nri.NRI
	// Faults hangs a call at a named step for crash tests; nil in
	// production.
	Faults *faultpoint.Point
	// Tracer makes the spans of a pod's steps (netns, CNI, pause); nil
	// makes none.
	Tracer trace.Tracer
	hosts  hostSource // tests only
}

// Manager runs pod sandboxes. It answers every query from memory.
type Manager struct {
	opts    Options
	log     *slog.Logger
	net     Network
	netns   *network.NetNS
	pause   PauseRuntime
	records *store.Records[Record]
	dir     string
	names   *reserve.Names
	// cgroups makes the pods' cgroups; defaultParent holds those of pods
	// that name no parent.
	cgroups       cgroup.Driver
	defaultParent cgroup.Parent

	// foreign are the ids of records this berth cannot read (another
	// format version, see store.VersionError), set by recovery: what
	// they name is not ours to clean up.
	foreign map[string]bool

	mu   sync.RWMutex
	pods map[string]*pod
}

// New loads the pods of a previous run and reconciles them with what
// really exists (see recover.go) before it returns.
func New(ctx context.Context, opts Options) (*Manager, error) {
	if opts.StateDir == "" || opts.Network == nil {
		return nil, errors.New("sandbox: StateDir and Network are required")
	}
	if opts.Pause == nil {
		opts.Pause = &DirectPause{}
	}
	driver, err := cgroup.ParseDriver(opts.CgroupDriver)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = 2 * time.Second
	}
	if opts.RunTimeout == 0 {
		opts.RunTimeout = 4 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Tracer = tracing.OrOff(opts.Tracer)
	if opts.hosts == (hostSource{}) {
		opts.hosts = defaultHostSource
	}
	// The default parent must be usable, or every pod without a parent
	// would fail late.
	defaultParent, err := driver.Parent(opts.DefaultCgroupParent)
	if err != nil {
		return nil, fmt.Errorf("sandbox: default cgroup parent: %w", err)
	}
	dir := filepath.Join(opts.StateDir, "sandboxes")
	// Pods do not survive a reboot: their records need no fsync.
	records, err := store.Open[Record](dir, store.Volatile)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	nsm, err := network.NewNetNS(filepath.Join(opts.StateDir, "netns"))
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	m := &Manager{
		opts:    opts,
		log:     opts.Logger.With("component", "sandbox"),
		net:     opts.Network,
		netns:   nsm,
		pause:   opts.Pause,
		records: records,
		dir:     dir,
		names:   reserve.New(reserve.Options{Kind: "pod sandbox", Timeout: opts.RunTimeout, Logger: opts.Logger}),
		pods:    map[string]*pod{},
		foreign: map[string]bool{},

		cgroups:       driver,
		defaultParent: defaultParent,
	}
	if err := m.recover(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Close releases the pause watchers. Pods keep running.
func (m *Manager) Close() {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, p := range m.pods {
		p.mu.RLock()
		if p.pause != nil {
			p.pause.Close()
		}
		p.mu.RUnlock()
	}
}

// UpdatePodCIDR hands the node's pod CIDRs (UpdateRuntimeConfig) to IPAM.
func (m *Manager) UpdatePodCIDR(ctx context.Context, cidrs string) error {
	var list []string
	for _, c := range strings.Split(cidrs, ",") {
		if c = strings.TrimSpace(c); c != "" {
			list = append(list, c)
		}
	}
	if err := m.net.SetPodCIDRs(list); err != nil {
		if errors.Is(err, network.ErrInvalidPodCIDR) {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return err
	}
	return nil
}

// lookup finds a pod by id or unique id prefix. A prefix that begins
// several pods' ids is an error naming them, not ErrNotFound: Stop and
// Remove must not take it for a pod that is gone.
func (m *Manager) lookup(id string) (*pod, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty id", ErrNotFound)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if p, ok := m.pods[id]; ok {
		return p, nil
	}
	_, p, err := idindex.Find(maps.All(m.pods), id)
	if errors.Is(err, idindex.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("pod sandbox %w", err)
	}
	return p, nil
}

func (m *Manager) add(p *pod) {
	m.mu.Lock()
	m.pods[p.rec.ID] = p
	m.mu.Unlock()
}

func (m *Manager) drop(id string) {
	m.mu.Lock()
	delete(m.pods, id)
	m.mu.Unlock()
}
