package nri

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// fakeDomain is berth as NRI sees it.
type fakeDomain struct {
	mu      sync.Mutex
	pods    []*api.PodSandbox
	ctrs    []*api.Container
	updates []*api.ContainerUpdate
	evicted []string
}

func (d *fakeDomain) PodSandboxes() []*api.PodSandbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.pods)
}

func (d *fakeDomain) PodSandbox(id string) *api.PodSandbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pods {
		if p.Id == id {
			return p
		}
	}
	return nil
}

func (d *fakeDomain) Containers() []*api.Container {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ctrs)
}

func (d *fakeDomain) UpdateContainer(_ context.Context, u *api.ContainerUpdate) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if u.GetContainerId() == "missing" {
		return errors.New("no such container")
	}
	d.updates = append(d.updates, u)
	return nil
}

func (d *fakeDomain) EvictContainer(_ context.Context, e *api.ContainerEviction) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.evicted = append(d.evicted, e.GetContainerId())
	return nil
}

func (d *fakeDomain) updated() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for _, u := range d.updates {
		ids = append(ids, u.GetContainerId())
	}
	return ids
}

// plugin records what it is told and answers as its fields say.
type plugin struct {
	mu        sync.Mutex
	events    []string
	syncPods  []string
	syncCtrs  []string
	synced    chan struct{}
	syncOnce  sync.Once
	syncGate  chan struct{} // Synchronize waits for it when set
	failRun   bool
	adjust    func(*api.Container) *api.ContainerAdjustment
	updates   []*api.ContainerUpdate // answered to CreateContainer
	stopReply []*api.ContainerUpdate // answered to StopContainer
}

func (p *plugin) record(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, fmt.Sprintf(format, args...))
}

func (p *plugin) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	if p.syncGate != nil {
		<-p.syncGate
	}
	p.mu.Lock()
	for _, x := range pods {
		p.syncPods = append(p.syncPods, x.Id)
	}
	for _, x := range ctrs {
		p.syncCtrs = append(p.syncCtrs, x.Id)
	}
	p.mu.Unlock()
	p.syncOnce.Do(func() { close(p.synced) })
	return nil, nil
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("run %s %s/%s", pod.Id, pod.Namespace, pod.Name)
	if p.failRun {
		return errors.New("induced failure")
	}
	return nil
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("stop %s", pod.Id)
	return nil
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("remove %s", pod.Id)
	return nil
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.record("create %s %s in %s", c.Id, c.Name, pod.Name)
	var a *api.ContainerAdjustment
	if p.adjust != nil {
		a = p.adjust(c)
	}
	return a, p.updates, nil
}

func (p *plugin) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record("start %s", c.Id)
	return nil
}

func (p *plugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, r *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.record("update %s", c.Id)
	u := &api.ContainerUpdate{}
	u.SetContainerId(c.Id)
	u.SetLinuxCPUSetCPUs("3")
	return []*api.ContainerUpdate{u}, nil
}

func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.record("stopc %s", c.Id)
	return p.stopReply, nil
}

func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record("removec %s", c.Id)
	return nil
}

func newPlugin() *plugin { return &plugin{synced: make(chan struct{})} }

// start runs NRI on a socket of its own.
func start(t *testing.T, d Domain) (*NRI, string) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "nri.sock")
	n, err := New(Config{
		SocketPath: sock, PluginPath: filepath.Join(dir, "plugins"), PluginConfigPath: filepath.Join(dir, "conf"),
		RequestTimeout: 5 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n, sock
}

// connect runs p as an external plugin until the test ends; it returns
// once p is synchronised unless wait is false.
func connect(t *testing.T, sock, name string, p *plugin, wait bool) {
	t.Helper()
	s, err := stub.New(p, stub.WithSocketPath(sock), stub.WithPluginName(name), stub.WithPluginIdx("10"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); s.Stop(); <-done })
	if !wait {
		return
	}
	select {
	case <-p.synced:
	case <-time.After(10 * time.Second):
		t.Fatal("plugin not synchronised in 10s")
	}
}

// registered waits until NRI has added the plugin (just after its
// Synchronize returns).
func registered(t *testing.T, n *NRI) {
	t.Helper()
	// Events go to plugins only once they are registered; the sync lock
	// is released at that moment.
	_, unblock := n.BlockSync(context.Background())
	unblock()
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestDisabled(t *testing.T) {
	var n *NRI
	ctx := context.Background()
	if n.Enabled() {
		t.Fatal("nil NRI enabled")
	}
	if got, unblock := n.BlockSync(ctx); got != ctx {
		t.Error("BlockSync of a nil NRI changed the context")
	} else {
		unblock()
	}
	c := &api.Container{Id: "c"}
	if err := n.RunPodSandbox(ctx, &api.PodSandbox{Id: "p"}); err != nil {
		t.Error(err)
	}
	if adj, err := n.CreateContainer(ctx, c); adj != nil || err != nil {
		t.Error(adj, err)
	}
	if err := n.StartContainer(ctx, c); err != nil {
		t.Error(err)
	}
	res := &api.LinuxResources{}
	if got, err := n.UpdateContainer(ctx, c, res); got != res || err != nil {
		t.Error(got, err)
	}
	n.StopContainer(ctx, c)
	n.ContainerExited(c)
	n.RemoveContainer(ctx, c)
	n.StopPodSandbox(ctx, &api.PodSandbox{Id: "p"})
	n.RemovePodSandbox(ctx, &api.PodSandbox{Id: "p"})
	if err := n.Start(nil); err != nil {
		t.Error(err)
	}
	n.Stop()
}

func TestLifecycle(t *testing.T) {
	d := &fakeDomain{
		pods: []*api.PodSandbox{{Id: "pod0", Name: "old", Namespace: "ns"}},
		ctrs: []*api.Container{{Id: "ctr0", PodSandboxId: "pod0", Name: "old", State: api.ContainerState_CONTAINER_RUNNING}},
	}
	n, sock := start(t, d)
	p := newPlugin()
	p.adjust = func(c *api.Container) *api.ContainerAdjustment {
		a := &api.ContainerAdjustment{}
		a.AddEnv("NRI", c.Name)
		return a
	}
	up := &api.ContainerUpdate{}
	up.SetContainerId("ctr0")
	up.SetLinuxCPUShares(10)
	p.updates = []*api.ContainerUpdate{up}
	connect(t, sock, "test", p, true)
	registered(t, n)
	if !slices.Equal(p.syncPods, []string{"pod0"}) || !slices.Equal(p.syncCtrs, []string{"ctr0"}) {
		t.Fatalf("synchronised with pods %v, containers %v", p.syncPods, p.syncCtrs)
	}

	ctx := context.Background()
	pod := &api.PodSandbox{Id: "pod1", Name: "web", Namespace: "ns"}
	if err := n.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.pods = append(d.pods, pod)
	d.mu.Unlock()
	c := &api.Container{Id: "ctr1", PodSandboxId: "pod1", Name: "app"}
	adj, err := n.CreateContainer(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(adj.GetEnv()) != 1 || adj.GetEnv()[0].Key != "NRI" || adj.GetEnv()[0].Value != "app" {
		t.Errorf("adjustment env = %v", adj.GetEnv())
	}
	if got := d.updated(); !slices.Equal(got, []string{"ctr0"}) {
		t.Errorf("updates applied at create: %v", got)
	}
	n.PostCreateContainer(ctx, c)
	if err := n.StartContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	res, err := n.UpdateContainer(ctx, c, &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: "0"}})
	if err != nil || res.GetCpu().GetCpus() != "3" {
		t.Errorf("UpdateContainer: %v %v", res, err)
	}
	// Stopped by a CRI call, by the pod's stop and by its exit: told once.
	n.StopContainer(ctx, c)
	n.StopContainer(ctx, c)
	n.ContainerExited(c)
	n.RemoveContainer(ctx, c)
	n.RemoveContainer(ctx, c)
	n.StopPodSandbox(ctx, pod)
	n.StopPodSandbox(ctx, pod)
	n.RemovePodSandbox(ctx, pod)
	n.RemovePodSandbox(ctx, pod)
	// The exit notification is asynchronous: let it come (or not).
	time.Sleep(100 * time.Millisecond)
	want := []string{
		"run pod1 ns/web", "create ctr1 app in web", "start ctr1", "update ctr1",
		"stopc ctr1", "removec ctr1", "stop pod1", "remove pod1",
	}
	if got := p.seen(); !slices.Equal(got, want) {
		t.Errorf("plugin saw\n%q\nwant\n%q", got, want)
	}
}

func TestExitAndRemoveOrder(t *testing.T) {
	d := &fakeDomain{}
	n, sock := start(t, d)
	p := newPlugin()
	connect(t, sock, "test", p, true)
	registered(t, n)
	ctx := context.Background()
	c := &api.Container{Id: "c", PodSandboxId: "p"}
	if _, err := n.CreateContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := n.StartContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	n.ContainerExited(c)
	eventually(t, "the exit's StopContainer", func() bool { return slices.Contains(p.seen(), "stopc c") })
	n.RemoveContainer(ctx, c)
	want := []string{"create c  in ", "start c", "stopc c", "removec c"}
	if got := p.seen(); !slices.Equal(got, want) {
		t.Errorf("plugin saw %q, want %q", got, want)
	}
}

func TestUndoCreate(t *testing.T) {
	n, sock := start(t, &fakeDomain{})
	p := newPlugin()
	connect(t, sock, "test", p, true)
	registered(t, n)
	ctx := context.Background()
	c := &api.Container{Id: "c", PodSandboxId: "p", Name: "x"}
	if _, err := n.CreateContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	n.UndoCreateContainer(ctx, c)
	want := []string{"create c x in ", "stopc c", "removec c"}
	if got := p.seen(); !slices.Equal(got, want) {
		t.Errorf("plugin saw %q, want %q", got, want)
	}
}

func TestRunPodSandboxFailure(t *testing.T) {
	n, sock := start(t, &fakeDomain{})
	p := newPlugin()
	p.failRun = true
	connect(t, sock, "test", p, true)
	registered(t, n)
	ctx := context.Background()
	pod := &api.PodSandbox{Id: "p", Name: "n", Namespace: "ns"}
	err := n.RunPodSandbox(ctx, pod)
	if err == nil {
		t.Fatal("RunPodSandbox succeeded although the plugin failed it")
	}
	// Plugins that saw the pod are told it is gone; a later stop is not
	// relayed.
	n.StopPodSandbox(ctx, pod)
	if got, want := p.seen(), []string{"run p ns/n", "remove p"}; !slices.Equal(got, want) {
		t.Errorf("plugin saw %q, want %q", got, want)
	}
}

func TestUnsolicitedUpdate(t *testing.T) {
	d := &fakeDomain{ctrs: []*api.Container{{Id: "c", State: api.ContainerState_CONTAINER_RUNNING}}}
	_, sock := start(t, d)
	p := newPlugin()
	s, err := stub.New(p, stub.WithSocketPath(sock), stub.WithPluginName("upd"), stub.WithPluginIdx("10"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	defer s.Stop()
	<-p.synced
	u := &api.ContainerUpdate{}
	u.SetContainerId("c")
	u.SetLinuxMemoryLimit(1 << 30)
	bad := &api.ContainerUpdate{}
	bad.SetContainerId("missing")
	bad.SetLinuxMemoryLimit(1 << 30)
	eventually(t, "the plugin registered", func() bool {
		failed, err := s.UpdateContainers([]*api.ContainerUpdate{u})
		return err == nil && len(failed) == 0
	})
	if got := d.updated(); len(got) == 0 || got[0] != "c" {
		t.Errorf("domain updates: %v", got)
	}
	failed, err := s.UpdateContainers([]*api.ContainerUpdate{bad})
	if err != nil || len(failed) != 1 || failed[0].GetContainerId() != "missing" {
		t.Errorf("failed update reported as %v, %v", failed, err)
	}
}

// A container created while a plugin synchronises is in its Synchronize
// or reaches it as an event: BlockSync holds the synchronisation off.
func TestBlockSync(t *testing.T) {
	d := &fakeDomain{}
	n, sock := start(t, d)
	ctx, unblock := n.BlockSync(context.Background())
	// Nested: no second read lock (which could deadlock behind a sync).
	if ctx2, unblock2 := n.BlockSync(ctx); ctx2 != ctx {
		t.Error("nested BlockSync blocked again")
	} else {
		unblock2()
	}
	p := newPlugin()
	connect(t, sock, "late", p, false)
	select {
	case <-p.synced:
		t.Fatal("plugin synchronised while a call held the sync block")
	case <-time.After(300 * time.Millisecond):
	}
	c := &api.Container{Id: "c1", PodSandboxId: "p", State: api.ContainerState_CONTAINER_CREATED}
	d.mu.Lock()
	d.ctrs = append(d.ctrs, c)
	d.mu.Unlock()
	unblock()
	<-p.synced
	if !slices.Equal(p.syncCtrs, []string{"c1"}) {
		t.Errorf("synchronised with %v", p.syncCtrs)
	}
	registered(t, n)
	// Known from the sync: its stop is relayed.
	n.StopContainer(context.Background(), c)
	if got := p.seen(); !slices.Equal(got, []string{"stopc c1"}) {
		t.Errorf("plugin saw %q", got)
	}
}

// A plugin whose Synchronize outlasts the request timeout is dropped: the
// reason hack/critest sets a longer timeout than the default.
func TestSyncTimeout(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "nri.sock")
	n, err := New(Config{SocketPath: sock, PluginPath: dir, RequestTimeout: 200 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(&fakeDomain{}); err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	p := newPlugin()
	p.syncGate = make(chan struct{})
	connect(t, sock, "slow", p, false)
	time.Sleep(500 * time.Millisecond)
	close(p.syncGate)
	<-p.synced
	registered(t, n)
	c := &api.Container{Id: "c", PodSandboxId: "p"}
	if _, err := n.CreateContainer(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if got := p.seen(); len(got) != 0 {
		t.Errorf("a plugin dropped at sync still got %q", got)
	}
}
