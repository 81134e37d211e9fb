package stats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/errdefs"
	"github.com/berth-runtime/berth/internal/idindex"
)

// ErrNotFound wraps a request for a pod or container that does not exist.
var ErrNotFound = errdefs.New("not found", errdefs.ErrNotFound)

// Container is what the collector needs to know of a container.
type Container struct {
	ID, PodID   string
	Metadata    *runtimeapi.ContainerMetadata
	Labels      map[string]string
	Annotations map[string]string
	Image       string // as the user named it, for metric labels
	Cgroup      string // its cgroup path
	// WritableLayer is the directory holding its writable layer's files.
	WritableLayer string
	Running       bool
	StartedAt     time.Time // zero until started
}

// Pod is what the collector needs to know of a pod sandbox.
type Pod struct {
	ID          string
	Metadata    *runtimeapi.PodSandboxMetadata
	Labels      map[string]string
	Annotations map[string]string
	Ready       bool
	// Cgroup is the pod's own cgroup, parent of its containers' (the one
	// the kubelet made and named); "" when the pod's parent is berth's
	// default, shared with other pods.
	Cgroup string
	// PauseCgroup is the infra process's cgroup.
	PauseCgroup string
	// NetNS is where the pod's network namespace is pinned; "" for the
	// host's network.
	NetNS string
}

// Containers lists containers, from memory.
type Containers interface{ StatsContainers() []Container }

// Pods lists pod sandboxes, from memory.
type Pods interface{ StatsPods() []Pod }

// Options configure a Collector.
type Options struct {
	Containers Containers
	Pods       Pods
	// LayerRoot is where writable layers live; its filesystem's mount
	// point identifies them to the kubelet.
	LayerRoot string
	// DiskRefresh is how old a writable layer's measured size may get
	// before it is walked again (default 10s, the kubelet's period).
	DiskRefresh time.Duration
	Logger      *slog.Logger
	cgroups     *Cgroups // tests
}

// Collector answers the stats and metrics RPCs.
type Collector struct {
	opts    Options
	log     *slog.Logger
	cg      *Cgroups
	cpu     *cpuRates
	disk    *diskUsage
	layerFS string
	// devNames caches block devices' /dev names by "major:minor": the
	// metrics label every container's I/O with them on every call.
	devNames sync.Map
}

// New finds the cgroup hierarchies and the writable layers' filesystem.
func New(opts Options) (*Collector, error) {
	if opts.Containers == nil || opts.Pods == nil {
		return nil, errors.New("stats: Containers and Pods are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DiskRefresh == 0 {
		opts.DiskRefresh = 10 * time.Second
	}
	cg := opts.cgroups
	if cg == nil {
		var err error
		if cg, err = NewCgroups(); err != nil {
			return nil, err
		}
	}
	log := opts.Logger.With("component", "stats")
	c := &Collector{
		opts: opts, log: log, cg: cg, cpu: newCPURates(),
		disk: newDiskUsage(opts.DiskRefresh, log),
	}
	if opts.LayerRoot != "" {
		c.layerFS = mountpointOf(opts.LayerRoot)
	}
	return c, nil
}

// ContainerStats is ContainerStats: any container, running or not (an
// exited one has only its writable layer left to measure).
func (c *Collector) ContainerStats(ctx context.Context, id string) (*runtimeapi.ContainerStats, error) {
	found, err := findID(c.opts.Containers.StatsContainers(), id, "container", func(c *Container) string { return c.ID })
	if err != nil {
		return nil, err
	}
	st, _, err := c.containerStats(ctx, found, time.Now())
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", found.ID, err)
	}
	return st, nil
}

// ListContainerStats is ListContainerStats: running containers matching
// the filter.
func (c *Collector) ListContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter) []*runtimeapi.ContainerStats {
	now := time.Now()
	var want []Container
	for _, ctr := range c.opts.Containers.StatsContainers() {
		if !ctr.Running ||
			(f.GetId() != "" && !strings.HasPrefix(ctr.ID, f.GetId())) ||
			(f.GetPodSandboxId() != "" && !strings.HasPrefix(ctr.PodID, f.GetPodSandboxId())) ||
			!matchLabels(ctr.Labels, f.GetLabelSelector()) {
			continue
		}
		want = append(want, ctr)
	}
	out := make([]*runtimeapi.ContainerStats, len(want))
	parallel(len(want), func(i int) { out[i], _, _ = c.containerStats(ctx, &want[i], now) })
	c.prune(now)
	return out
}

// PodSandboxStats is PodSandboxStats.
func (c *Collector) PodSandboxStats(ctx context.Context, id string) (*runtimeapi.PodSandboxStats, error) {
	found, err := findID(c.opts.Pods.StatsPods(), id, "pod sandbox", func(p *Pod) string { return p.ID })
	if err != nil {
		return nil, err
	}
	return c.podStats(ctx, found, byPod(c.opts.Containers.StatsContainers())[found.ID], time.Now()), nil
}

// findID finds the item of items whose id (idOf) is id, or the only one
// it is a prefix of; kind names the items in errors. A prefix of several
// is an error naming them, not ErrNotFound.
func findID[T any](items []T, id, kind string, idOf func(*T) string) (*T, error) {
	_, found, err := idindex.Find(idindex.Slice(items, idOf), id)
	if errors.Is(err, idindex.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s %s", ErrNotFound, kind, id)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %w", kind, err)
	}
	return found, nil
}

// ListPodSandboxStats is ListPodSandboxStats: ready pods matching the
// filter.
func (c *Collector) ListPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter) []*runtimeapi.PodSandboxStats {
	now := time.Now()
	ctrs := byPod(c.opts.Containers.StatsContainers())
	var want []Pod
	for _, p := range c.opts.Pods.StatsPods() {
		if !p.Ready || (f.GetId() != "" && !strings.HasPrefix(p.ID, f.GetId())) || !matchLabels(p.Labels, f.GetLabelSelector()) {
			continue
		}
		want = append(want, p)
	}
	out := make([]*runtimeapi.PodSandboxStats, len(want))
	parallel(len(want), func(i int) { out[i] = c.podStats(ctx, &want[i], ctrs[want[i].ID], now) })
	sort.Slice(out, func(i, j int) bool { return out[i].Attributes.Id < out[j].Attributes.Id })
	c.prune(now)
	return out
}

// parallel runs fn(0..n-1) on as many goroutines as there are CPUs: a
// sample is mostly system calls, which the CPUs can do side by side.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func byPod(ctrs []Container) map[string][]Container {
	m := map[string][]Container{}
	for _, c := range ctrs {
		m[c.PodID] = append(m[c.PodID], c)
	}
	return m
}

func (c *Collector) prune(now time.Time) {
	c.cpu.prune(now)
	c.disk.prune(now)
}

func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// containerStats measures one container; the sample is returned for the
// pod's sum. A writable layer never measured whose walk does not end in
// time is left out, with the error naming where the walk is stuck: the
// container's other figures are good.
func (c *Collector) containerStats(ctx context.Context, ctr *Container, now time.Time) (*runtimeapi.ContainerStats, *Sample, error) {
	st := &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{
		Id: ctr.ID, Metadata: ctr.Metadata, Labels: ctr.Labels, Annotations: ctr.Annotations,
	}}
	var s *Sample
	if ctr.Cgroup != "" {
		s = c.cg.Read(ctr.Cgroup)
		st.Cpu = c.cpuUsage("c/"+ctr.ID, s)
		st.Memory = memoryUsage(s)
		st.Swap = swapUsage(s)
		st.Io = ioUsage(s)
	}
	if ctr.WritableLayer != "" {
		b, n, at, err := c.disk.get(ctx, ctr.WritableLayer, now)
		if err != nil {
			c.log.Debug("writable layer not measured", "container", ctr.ID, "error", err)
			return st, s, err
		}
		st.WritableLayer = &runtimeapi.FilesystemUsage{
			Timestamp:  at.UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: c.layerFS},
			UsedBytes:  &runtimeapi.UInt64Value{Value: b},
			InodesUsed: &runtimeapi.UInt64Value{Value: n},
		}
	}
	return st, s, nil
}

// podStats measures a pod: its own cgroup if the kubelet gave it one,
// else the sum of pause's and its containers' cgroups.
func (c *Collector) podStats(ctx context.Context, p *Pod, ctrs []Container, now time.Time) *runtimeapi.PodSandboxStats {
	linux := &runtimeapi.LinuxPodSandboxStats{}
	var sum *Sample
	if p.Cgroup != "" {
		sum = c.cg.Read(p.Cgroup)
	} else if p.PauseCgroup != "" {
		sum = c.cg.Read(p.PauseCgroup)
	}
	for i := range ctrs {
		if !ctrs[i].Running {
			continue
		}
		st, s, _ := c.containerStats(ctx, &ctrs[i], now)
		linux.Containers = append(linux.Containers, st)
		if p.Cgroup == "" && sum != nil && s != nil {
			sum.Add(s)
		}
	}
	sort.Slice(linux.Containers, func(i, j int) bool { return linux.Containers[i].Attributes.Id < linux.Containers[j].Attributes.Id })
	if sum != nil {
		linux.Cpu = c.cpuUsage("p/"+p.ID, sum)
		linux.Memory = memoryUsage(sum)
		linux.Io = ioUsage(sum)
		if sum.HasPids {
			linux.Process = &runtimeapi.ProcessUsage{Timestamp: sum.At.UnixNano(), ProcessCount: &runtimeapi.UInt64Value{Value: sum.Pids}}
		}
	}
	if p.NetNS != "" {
		if ifaces, err := readNetDev(p.NetNS); err != nil {
			c.log.Debug("pod network counters", "pod", p.ID, "error", err)
		} else {
			linux.Network = networkUsage(ifaces, time.Now())
		}
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: p.ID, Metadata: p.Metadata, Labels: p.Labels, Annotations: p.Annotations},
		Linux:      linux,
	}
}

func (c *Collector) cpuUsage(key string, s *Sample) *runtimeapi.CpuUsage {
	if !s.HasCPU {
		return nil
	}
	u := &runtimeapi.CpuUsage{
		Timestamp:            s.At.UnixNano(),
		UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: s.CPU},
		Psi:                  psi(s.PSI["cpu"]),
	}
	if r := c.cpu.rate(key, s.CPU, s.At); r != nil {
		u.UsageNanoCores = &runtimeapi.UInt64Value{Value: *r}
	}
	return u
}

func memoryUsage(s *Sample) *runtimeapi.MemoryUsage {
	if !s.HasMemory {
		return nil
	}
	m := &runtimeapi.MemoryUsage{
		Timestamp:       s.At.UnixNano(),
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: s.MemWorkingSet},
		UsageBytes:      &runtimeapi.UInt64Value{Value: s.MemUsage},
		RssBytes:        &runtimeapi.UInt64Value{Value: s.MemRSS},
		PageFaults:      &runtimeapi.UInt64Value{Value: s.PageFaults},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: s.MajorPageFaults},
		Psi:             psi(s.PSI["memory"]),
	}
	if s.MemLimit > 0 {
		m.AvailableBytes = &runtimeapi.UInt64Value{Value: sub(s.MemLimit, s.MemWorkingSet)}
	}
	return m
}

func swapUsage(s *Sample) *runtimeapi.SwapUsage {
	if !s.HasSwap {
		return nil
	}
	u := &runtimeapi.SwapUsage{Timestamp: s.At.UnixNano(), SwapUsageBytes: &runtimeapi.UInt64Value{Value: s.SwapUsage}}
	if s.SwapLimit > 0 {
		u.SwapAvailableBytes = &runtimeapi.UInt64Value{Value: sub(s.SwapLimit, s.SwapUsage)}
	}
	return u
}

func ioUsage(s *Sample) *runtimeapi.IoUsage {
	p := s.PSI["io"]
	if p == nil {
		return nil
	}
	return &runtimeapi.IoUsage{Timestamp: s.At.UnixNano(), Psi: psi(p)}
}

func psi(p *Pressure) *runtimeapi.PsiStats {
	if p == nil {
		return nil
	}
	data := func(l PressureLine) *runtimeapi.PsiData {
		return &runtimeapi.PsiData{Total: l.Total * 1000, Avg10: l.Avg10, Avg60: l.Avg60, Avg300: l.Avg300}
	}
	out := &runtimeapi.PsiStats{Some: data(p.Some)}
	if p.HasFull {
		out.Full = data(p.Full)
	}
	return out
}

// defaultInterface is the interface CNI plugins give pods, which the
// kubelet reports as the pod's.
const defaultInterface = "eth0"

func networkUsage(ifaces []Iface, at time.Time) *runtimeapi.NetworkUsage {
	n := &runtimeapi.NetworkUsage{Timestamp: at.UnixNano()}
	for _, i := range ifaces {
		u := &runtimeapi.NetworkInterfaceUsage{
			Name:     i.Name,
			RxBytes:  &runtimeapi.UInt64Value{Value: i.RxBytes},
			RxErrors: &runtimeapi.UInt64Value{Value: i.RxErrors},
			TxBytes:  &runtimeapi.UInt64Value{Value: i.TxBytes},
			TxErrors: &runtimeapi.UInt64Value{Value: i.TxErrors},
		}
		if i.Name == defaultInterface {
			n.DefaultInterface = u
		}
		// The default interface is listed too, though the CRI's comment
		// says "excluding the default": the kubelet's summary copies this
		// list as the pod's interfaces, which with cAdvisor hold every
		// interface, and the node e2e Summary API spec (with
		// PodAndContainerStatsFromCRI) fails a pod whose list is empty.
		// containerd lists it the same way.
		n.Interfaces = append(n.Interfaces, u)
	}
	return n
}
