// Package nri connects berth to NRI (Node Resource Interface) plugins: the
// protocol, plugin registration and the ordering of plugins are those of
// containerd's NRI library (github.com/containerd/nri/pkg/adaptation); this
// package is berth's side of it.
//
// The sandbox and container services call the hooks below at the points of
// their lifecycles where containerd and CRI-O call theirs. A nil *NRI is
// NRI disabled: every hook is then a no-op, so callers need no checks.
//
// What berth must provide to plugins that connect late (the current pods
// and containers) and what plugins may ask of berth (container updates and
// evictions) go through a Domain, given to Start.
package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	"github.com/berth-runtime/berth/internal/version"
)

// Defaults, as containerd's and CRI-O's.
const (
	DefaultSocketPath          = nri.DefaultSocketPath // /var/run/nri/nri.sock
	DefaultPluginPath          = nri.DefaultPluginPath // /opt/nri/plugins
	DefaultPluginConfigPath    = nri.DefaultPluginConfigPath
	DefaultRegistrationTimeout = nri.DefaultPluginRegistrationTimeout
	DefaultRequestTimeout      = nri.DefaultPluginRequestTimeout
)

// Config configures NRI.
type Config struct {
	// SocketPath is where external plugins connect.
	SocketPath string
	// PluginPath holds pre-installed plugins (executables named
	// <index>-<name>), started by berth; PluginConfigPath their
	// configuration (<index>-<name>.conf or <name>.conf).
	PluginPath       string
	PluginConfigPath string
	// DisableConnections refuses external plugins: only pre-installed
	// ones run, and no socket is created.
	DisableConnections bool
	// RegistrationTimeout bounds a plugin's registration;
	// RequestTimeout each request to a plugin. Zero means the default.
	RegistrationTimeout time.Duration
	RequestTimeout      time.Duration
}

// Domain is what NRI needs of the rest of berth.
type Domain interface {
	// PodSandboxes lists the pods berth knows, for Synchronize.
	PodSandboxes() []*api.PodSandbox
	// PodSandbox describes one pod; nil if berth does not know it.
	PodSandbox(id string) *api.PodSandbox
	// Containers lists the containers that have not exited, for
	// Synchronize.
	Containers() []*api.Container
	// UpdateContainer applies a plugin's update of a container's
	// resources to the running container.
	UpdateContainer(ctx context.Context, u *api.ContainerUpdate) error
	// EvictContainer stops a container a plugin asked to evict.
	EvictContainer(ctx context.Context, e *api.ContainerEviction) error
}

// NRI relays berth's pod and container lifecycle to NRI plugins.
type NRI struct {
	log    *slog.Logger
	cfg    Config
	nri    *nri.Adaptation
	domain Domain

	// mu serialises the events (as containerd does): with state, an event
	// reaches plugins once, and in lifecycle order, even when an exit
	// notification races a CRI call about the same container.
	mu      sync.Mutex
	state   map[string]state
	started atomic.Bool
}

// state is how far plugins have been told an object went.
type state int

const (
	stateUnknown state = iota // never told, or removed: no more events
	stateCreated
	stateRunning
	stateStopped
)

// New prepares NRI; plugins are started and accepted by Start.
func New(cfg Config, log *slog.Logger) (*NRI, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.SocketPath == "" {
		cfg.SocketPath = DefaultSocketPath
	}
	if cfg.PluginPath == "" {
		cfg.PluginPath = DefaultPluginPath
	}
	if cfg.PluginConfigPath == "" {
		cfg.PluginConfigPath = DefaultPluginConfigPath
	}
	if cfg.RegistrationTimeout <= 0 {
		cfg.RegistrationTimeout = DefaultRegistrationTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	n := &NRI{log: log.With("component", "nri"), cfg: cfg, state: map[string]state{}}
	setLogger(n.log)
	// The library keeps its timeouts in package variables: one NRI per
	// process.
	nri.SetPluginRegistrationTimeout(cfg.RegistrationTimeout)
	nri.SetPluginRequestTimeout(cfg.RequestTimeout)
	opts := []nri.Option{
		nri.WithSocketPath(cfg.SocketPath),
		nri.WithPluginPath(cfg.PluginPath),
		nri.WithPluginConfigPath(cfg.PluginConfigPath),
	}
	if cfg.DisableConnections {
		opts = append(opts, nri.WithDisabledExternalConnections())
	}
	a, err := nri.New("berth", version.Version, n.synchronize, n.updateFromPlugin, opts...)
	if err != nil {
		return nil, fmt.Errorf("nri: %w", err)
	}
	n.nri = a
	return n, nil
}

// Enabled tells whether NRI is on.
func (n *NRI) Enabled() bool { return n != nil && n.nri != nil }

// active: enabled and started. Events before Start (during recovery) are
// not relayed: Start takes what exists then as known to plugins.
func (n *NRI) active() bool { return n.Enabled() && n.started.Load() }

// Start starts the pre-installed plugins and accepts external ones on the
// socket. Every pod and container of d that exists now is taken as known
// to plugins (they learn of them through Synchronize): later events about
// them are relayed.
func (n *NRI) Start(d Domain) error {
	if !n.Enabled() {
		return nil
	}
	if d == nil {
		return errors.New("nri: Start without a domain")
	}
	n.domain = d
	n.mu.Lock()
	for _, p := range d.PodSandboxes() {
		// A pod that is not ready may have died rather than been stopped:
		// a StopPodSandbox still reaches plugins.
		n.state[p.GetId()] = stateRunning
	}
	for _, c := range d.Containers() {
		n.state[c.GetId()] = containerState(c.GetState())
	}
	n.mu.Unlock()
	n.started.Store(true)
	if err := n.nri.Start(); err != nil {
		n.started.Store(false)
		return fmt.Errorf("nri: %w", err)
	}
	n.log.Info("NRI started", "socket", n.socketShown(), "plugin_path", n.cfg.PluginPath,
		"registration_timeout", n.cfg.RegistrationTimeout, "request_timeout", n.cfg.RequestTimeout)
	return nil
}

func (n *NRI) socketShown() string {
	if n.cfg.DisableConnections {
		return "(external plugins disabled)"
	}
	return n.cfg.SocketPath
}

// Stop disconnects every plugin and removes nothing else: pods and
// containers keep running.
func (n *NRI) Stop() {
	if !n.Enabled() {
		return
	}
	n.nri.Stop()
}

type syncBlockKey struct{}

// BlockSync holds off the synchronisation of a plugin that is connecting
// until unblock is called, so that an object a call creates, changes or
// removes is either in the plugin's Synchronize or reported to it by an
// event, never lost in between. A caller takes it before any lock of its
// own and passes the returned context down: nested calls with it do not
// block again (a nested read lock could deadlock behind a waiting sync).
func (n *NRI) BlockSync(ctx context.Context) (context.Context, func()) {
	if !n.Enabled() || ctx.Value(syncBlockKey{}) != nil {
		return ctx, func() {}
	}
	b := n.nri.BlockPluginSync()
	return context.WithValue(ctx, syncBlockKey{}, true), b.Unblock
}

// synchronize is the library's SyncFn: it hands a connecting plugin every
// pod and every container that has not exited, then applies the updates
// the plugin asks for.
func (n *NRI) synchronize(ctx context.Context, cb nri.SyncCB) error {
	n.mu.Lock()
	pods := n.domain.PodSandboxes()
	ctrs := n.domain.Containers()
	for _, p := range pods {
		if n.state[p.GetId()] == stateUnknown {
			n.state[p.GetId()] = stateRunning
		}
	}
	for _, c := range ctrs {
		if n.state[c.GetId()] == stateUnknown {
			n.state[c.GetId()] = containerState(c.GetState())
		}
	}
	n.log.Info("synchronizing NRI plugin", "pods", len(pods), "containers", len(ctrs))
	updates, err := cb(ctx, pods, ctrs)
	n.mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := n.apply(ctx, updates, nil); err != nil {
		n.log.Warn("NRI: updates requested at synchronization failed", "error", err)
	}
	return nil
}

// updateFromPlugin is the library's UpdateFn: a plugin's unsolicited
// updates. It takes no lock of this package, as a plugin may send them
// while it handles an event.
func (n *NRI) updateFromPlugin(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return n.apply(ctx, updates, nil)
}

// apply performs updates, then evictions. It returns the updates that
// failed (a plugin learns which from the list, as the library reports it)
// and an error for failed evictions.
func (n *NRI) apply(ctx context.Context, updates []*api.ContainerUpdate, evict []*api.ContainerEviction) ([]*api.ContainerUpdate, error) {
	var (
		failed []*api.ContainerUpdate
		errs   []error
	)
	for _, u := range updates {
		if u == nil || u.GetContainerId() == "" {
			continue
		}
		if err := n.domain.UpdateContainer(ctx, u); err != nil {
			n.log.Warn("NRI container update failed", "container", u.GetContainerId(), "ignore_failure", u.GetIgnoreFailure(), "error", err)
			if !u.GetIgnoreFailure() {
				failed = append(failed, u)
			}
		}
	}
	for _, e := range evict {
		n.log.Info("NRI plugin evicts container", "container", e.GetContainerId(), "reason", e.GetReason())
		if err := n.domain.EvictContainer(ctx, e); err != nil {
			errs = append(errs, fmt.Errorf("evict container %s: %w", e.GetContainerId(), err))
		}
	}
	return failed, errors.Join(errs...)
}

// pod is the pod of a container event.
func (n *NRI) pod(id string) *api.PodSandbox {
	if p := n.domain.PodSandbox(id); p != nil {
		return p
	}
	return &api.PodSandbox{Id: id}
}

func containerState(s api.ContainerState) state {
	switch s {
	case api.ContainerState_CONTAINER_CREATED:
		return stateCreated
	case api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
		return stateRunning
	case api.ContainerState_CONTAINER_STOPPED:
		return stateStopped
	}
	return stateUnknown
}

func (n *NRI) set(id string, s state) {
	if s == stateUnknown {
		delete(n.state, id)
		return
	}
	n.state[id] = s
}

func (n *NRI) needsStop(id string) bool {
	s := n.state[id]
	return s == stateCreated || s == stateRunning
}

// RunPodSandbox tells plugins of a new pod, before RunPodSandbox returns
// and before the pod is listed. An error fails RunPodSandbox; the plugins
// that already saw the pod are then told it is removed.
func (n *NRI) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if !n.active() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.nri.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
	if err != nil {
		if rerr := n.nri.RemovePodSandbox(context.WithoutCancel(ctx), &api.RemovePodSandboxRequest{Pod: pod}); rerr != nil {
			n.log.Warn("NRI RemovePodSandbox after a failed RunPodSandbox", "pod", pod.GetId(), "error", rerr)
		}
		n.set(pod.GetId(), stateUnknown)
		return fmt.Errorf("NRI RunPodSandbox: %w", err)
	}
	n.set(pod.GetId(), stateRunning)
	return nil
}

// StopPodSandbox tells plugins a pod stops: its containers have stopped,
// its network and pause still exist. Once per pod; errors are logged.
func (n *NRI) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) {
	if !n.active() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopPod(ctx, pod)
}

// stopPod sends StopPodSandbox unless plugins were told already; the
// caller holds n.mu.
func (n *NRI) stopPod(ctx context.Context, pod *api.PodSandbox) {
	if n.state[pod.GetId()] != stateRunning {
		return
	}
	if err := n.nri.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod}); err != nil {
		n.log.Warn("NRI StopPodSandbox", "pod", pod.GetId(), "error", err)
	}
	n.set(pod.GetId(), stateStopped)
}

// UpdatePodSandbox tells plugins of an UpdatePodSandboxResources before
// it is applied; an error fails it.
func (n *NRI) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error {
	if !n.active() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.nri.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{
		Pod: pod, OverheadLinuxResources: overhead, LinuxResources: res,
	}); err != nil {
		return fmt.Errorf("NRI UpdatePodSandbox: %w", err)
	}
	return nil
}

// PostUpdatePodSandbox tells plugins a pod's resources changed.
func (n *NRI) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) {
	if !n.active() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.nri.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: pod}); err != nil {
		n.log.Warn("NRI PostUpdatePodSandbox", "pod", pod.GetId(), "error", err)
	}
}

// RemovePodSandbox tells plugins a pod is gone (after its containers).
func (n *NRI) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) {
	if !n.active() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state[pod.GetId()] == stateUnknown {
		return
	}
	n.stopPod(ctx, pod)
	if err := n.nri.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod}); err != nil {
		n.log.Warn("NRI RemovePodSandbox", "pod", pod.GetId(), "error", err)
	}
	n.set(pod.GetId(), stateUnknown)
}

// CreateContainer asks plugins how to adjust a container about to be
// created (ctr describes it as its OCI spec stands) and returns the
// combined adjustment, for AdjustSpec. Updates and evictions of other
// containers the plugins ask for are applied before it returns. An error
// fails CreateContainer, which then calls UndoCreateContainer.
func (n *NRI) CreateContainer(ctx context.Context, ctr *api.Container) (*api.ContainerAdjustment, error) {
	if !n.active() {
		return nil, nil
	}
	n.mu.Lock()
	resp, err := n.nri.CreateContainer(ctx, &api.CreateContainerRequest{Pod: n.pod(ctr.GetPodSandboxId()), Container: ctr})
	n.set(ctr.GetId(), stateCreated)
	n.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("NRI CreateContainer: %w", err)
	}
	// Outside the lock: an update or eviction is a call into the container
	// service, which may be waiting for this lock itself.
	if _, err := n.apply(ctx, resp.GetUpdate(), resp.GetEvict()); err != nil {
		n.log.Warn("NRI: updates requested at CreateContainer failed", "container", ctr.GetId(), "error", err)
	}
	return resp.GetAdjust(), nil
}

// UndoCreateContainer tells plugins that a container they saw in
// CreateContainer will not exist after all (stopped, then removed), so
// that they release what they gave it.
func (n *NRI) UndoCreateContainer(ctx context.Context, ctr *api.Container) {
	if !n.active() {
		return
	}
	n.RemoveContainer(ctx, ctr)
}

// PostCreateContainer tells plugins a container was created.
func (n *NRI) PostCreateContainer(ctx context.Context, ctr *api.Container) {
	if !n.active() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.nri.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: n.pod(ctr.GetPodSandboxId()), Container: ctr}); err != nil {
		n.log.Warn("NRI PostCreateContainer", "container", ctr.GetId(), "error", err)
	}
}

// StartContainer tells plugins a container is about to start; an error
// fails StartContainer.
func (n *NRI) StartContainer(ctx context.Context, ctr *api.Container) error {
	if !n.active() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.nri.StartContainer(ctx, &api.StartContainerRequest{Pod: n.pod(ctr.GetPodSandboxId()), Container: ctr})
	n.set(ctr.GetId(), stateRunning)
	if err != nil {
		return fmt.Errorf("NRI StartContainer: %w", err)
	}
	return nil
}

// PostStartContainer tells plugins a container started.
func (n *NRI) PostStartContainer(ctx context.Context, ctr *api.Container) {
	if !n.active() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.nri.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: n.pod(ctr.GetPodSandboxId()), Container: ctr}); err != nil {
		n.log.Warn("NRI PostStartContainer", "container", ctr.GetId(), "error", err)
	}
}

// UpdateContainer asks plugins about an UpdateContainerResources: it
// returns the resources to apply (res, or what the plugins made of it).
// Updates the plugins ask for other containers are applied first. An
// error fails the update.
func (n *NRI) UpdateContainer(ctx context.Context, ctr *api.Container, res *api.LinuxResources) (*api.LinuxResources, error) {
	if !n.active() {
		return res, nil
	}
	n.mu.Lock()
	resp, err := n.nri.UpdateContainer(ctx, &api.UpdateContainerRequest{
		Pod: n.pod(ctr.GetPodSandboxId()), Container: ctr, LinuxResources: res,
	})
	n.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("NRI UpdateContainer: %w", err)
	}
	// The library answers with the requested container's update last:
	// the request's resources as the plugins changed them, or nil when
	// none did.
	updates, own := resp.GetUpdate(), res
	if k := len(updates); k > 0 && (updates[k-1] == nil || updates[k-1].GetContainerId() == ctr.GetId()) {
		if r := updates[k-1].GetLinux().GetResources(); r != nil {
			own = r
		}
		updates = updates[:k-1]
	}
	if _, err := n.apply(ctx, updates, resp.GetEvict()); err != nil {
		n.log.Warn("NRI: updates requested at UpdateContainer failed", "container", ctr.GetId(), "error", err)
	}
	return own, nil
}

// PostUpdateContainer tells plugins a container's resources changed.
func (n *NRI) PostUpdateContainer(ctx context.Context, ctr *api.Container) {
	if !n.active() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.nri.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: n.pod(ctr.GetPodSandboxId()), Container: ctr}); err != nil {
		n.log.Warn("NRI PostUpdateContainer", "container", ctr.GetId(), "error", err)
	}
}

// StopContainer tells plugins a container stopped (its process has
// exited): once per container, whether it was stopped by StopContainer,
// by its pod's stop or exited on its own (ContainerExited). Updates the
// plugins ask for are applied in the background.
func (n *NRI) StopContainer(ctx context.Context, ctr *api.Container) {
	if !n.active() {
		return
	}
	n.mu.Lock()
	updates := n.stopContainer(ctx, ctr)
	n.mu.Unlock()
	n.applyLater(ctx, "StopContainer", ctr, updates)
}

// applyLater applies the updates plugins ask for when a container stops
// (typically: give its resources to others) without waiting: the caller
// may hold the stopped container's lock while another call holding one of
// the updated containers' waits for this one.
func (n *NRI) applyLater(ctx context.Context, event string, ctr *api.Container, updates []*api.ContainerUpdate) {
	if len(updates) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	go func() {
		if _, err := n.apply(ctx, updates, nil); err != nil {
			n.log.Warn("NRI: updates requested at "+event+" failed", "container", ctr.GetId(), "error", err)
		}
	}()
}

func (n *NRI) stopContainer(ctx context.Context, ctr *api.Container) []*api.ContainerUpdate {
	if !n.needsStop(ctr.GetId()) {
		return nil
	}
	resp, err := n.nri.StopContainer(ctx, &api.StopContainerRequest{Pod: n.pod(ctr.GetPodSandboxId()), Container: ctr})
	n.set(ctr.GetId(), stateStopped)
	if err != nil {
		n.log.Warn("NRI StopContainer", "container", ctr.GetId(), "error", err)
		return nil
	}
	return resp.GetUpdate()
}

// ContainerExited is StopContainer for an exit berth sees by itself; it
// does not wait for the plugins.
func (n *NRI) ContainerExited(ctr *api.Container) {
	if !n.active() {
		return
	}
	go n.StopContainer(context.Background(), ctr)
}

// RemoveContainer tells plugins a container is gone (told it stopped
// first if it had not been).
func (n *NRI) RemoveContainer(ctx context.Context, ctr *api.Container) {
	if !n.active() {
		return
	}
	n.mu.Lock()
	if n.state[ctr.GetId()] == stateUnknown {
		n.mu.Unlock()
		return
	}
	updates := n.stopContainer(ctx, ctr)
	if err := n.nri.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: n.pod(ctr.GetPodSandboxId()), Container: ctr}); err != nil {
		n.log.Warn("NRI RemoveContainer", "container", ctr.GetId(), "error", err)
	}
	n.set(ctr.GetId(), stateUnknown)
	n.mu.Unlock()
	n.applyLater(ctx, "StopContainer", ctr, updates)
}
