// Package density is `bench density`: pod density under the stock
// kubelet. It runs the kubelet standalone with maxPods as asked on berth,
// then on containerd v2.4.2 (as hack/bench-compare builds and configures
// it), creates that many static pods of one busybox container at once, and
// reports, for each runtime and their ratio: the time until all are
// Running, the kubelet's PLEG relist duration p50/p99 (its /metrics)
// while they start, with all running and during the teardown, pod start
// p50/p99 as the kubelet sees it, the daemon's RSS, the runtime's memory
// per pod (its per-pod processes' PSS, the pod cgroups' memory) and the
// teardown's time. hack/density builds what it needs and runs it.
//
// It takes the kubelet-test lock (the kubelet's device-plugin dir and the
// kernel settings it writes are machine-wide), and leaves the host as it
// found it: processes, mounts, cgroups, links, iptables, sysctls; what the
// runtime or the kubelet should have removed and did not is counted as a
// leak (exit status 1).
package density

import (
	"github.com/berth-runtime/berth/bench/report"
	"github.com/berth-runtime/berth/test/kubehost"
	"github.com/berth-runtime/berth/test/runtimeharness"

	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	busybox    = "docker.io/library/busybox:latest"
	pauseImage = "registry.k8s.io/pause:3.9"
)

type options struct {
	pods, maxPods       int
	runtimes            string
	kubeDir, berth      string
	containerdDir, runc string
	cniBinDir, registry string
	out                 string
	featureGates        string
	kubeletV            int
	idle, steady        time.Duration
	timeout             time.Duration
}

// Main runs `bench density` with args (its flags) and returns the exit
// status.
func Main(args []string) int {
	var o options
	fs := flag.NewFlagSet("bench density", flag.ExitOnError)
	cache := os.Getenv("BERTH_CACHE")
	fs.IntVar(&o.pods, "pods", 250, "static pods to create at once")
	fs.IntVar(&o.maxPods, "max-pods", 250, "the kubelet's maxPods")
	fs.StringVar(&o.runtimes, "runtimes", "berth,containerd", "runtimes to run, in order")
	fs.StringVar(&o.kubeDir, "kubelet-dir", os.Getenv("BERTH_KUBELET_DIR"), "directory holding the kubelet (hack/kubelet)")
	fs.StringVar(&o.berth, "berth", os.Getenv("BERTH_BINARY"), "berth binary")
	fs.StringVar(&o.containerdDir, "containerd-dir", filepath.Join(cache, "containerd-v2.4.2"), "directory holding containerd and containerd-shim-runc-v2 (hack/install-containerd)")
	fs.StringVar(&o.runc, "runc", filepath.Join(cache, "runc-v1.5.2", "runc"), "runc binary for containerd")
	fs.StringVar(&o.cniBinDir, "cni-bin-dir", os.Getenv("BERTH_CNI_BIN_DIR"), "CNI plugin directory")
	fs.StringVar(&o.registry, "registry", os.Getenv("BERTH_TEST_REGISTRY"), "host:port of the local registry (hack/registry)")
	fs.StringVar(&o.out, "out", filepath.Join(os.Getenv("BERTH_OUTPUT"), "density"), "report directory")
	fs.IntVar(&o.kubeletV, "kubelet-v", 1, "the kubelet's log verbosity (--v)")
	fs.StringVar(&o.featureGates, "feature-gates", "", "the kubelet's feature gates, NAME=true|false,... (e.g. EventedPLEG=true,PLEGOnDemandRelist=true)")
	fs.DurationVar(&o.idle, "idle", 15*time.Second, "wait after the kubelet is up, before the pods")
	fs.DurationVar(&o.steady, "steady", 30*time.Second, "PLEG window with every pod running")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "limit for the start and for the teardown, each")
	fs.Parse(args)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := mainErr(log, &o); err != nil {
		log.Error("density", "error", err)
		return 1
	}
	return 0
}

func mainErr(log *slog.Logger, o *options) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
	if o.registry == "" {
		return fmt.Errorf("no registry: set BERTH_TEST_REGISTRY or -registry (hack/density starts one)")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	unlock, err := kubehost.Lock(ctx, func() { log.Info("another kubelet run holds the lock: waiting", "lock", kubehost.LockPath) })
	if err != nil {
		return err
	}
	defer unlock()
	var results []*result
	leaks := 0
	for _, name := range strings.Split(o.runtimes, ",") {
		r, err := run(ctx, log, o, name)
		if r != nil {
			leaks += r.Leaks
			b, _ := json.MarshalIndent(r, "", "  ")
			os.WriteFile(filepath.Join(o.out, name+".json"), b, 0o644)
			results = append(results, r)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	t := table(results)
	os.WriteFile(filepath.Join(o.out, "table.md"), []byte(t), 0o644)
	fmt.Print(t)
	if leaks > 0 {
		return fmt.Errorf("%d things left on the host (logged above as LEAK)", leaks)
	}
	return nil
}

// phase is the kubelet's PLEG relist figures over one part of the run.
type phase struct {
	Relists  float64 `json:"relists"`
	P50      num     `json:"p50_s"`
	P99      num     `json:"p99_s"`
	Mean     num     `json:"mean_s"`
	Over1s   float64 `json:"over_1s"`         // relists that took more than 1 s
	Interval num     `json:"interval_mean_s"` // between relists' starts
}

type result struct {
	Runtime      string    `json:"runtime"`
	Version      string    `json:"version"`
	FeatureGates string    `json:"kubelet_feature_gates,omitempty"`
	Pods         int       `json:"pods"`
	Running      int       `json:"running"`
	PodIPs       int       `json:"pod_ips"` // distinct IPs on the benchmark's network among the Running pods
	LoadBefore   string    `json:"load_before"`
	LoadAfter    string    `json:"load_after"`
	Started      time.Time `json:"started"`
	AllRunning   float64   `json:"all_running_s"`
	StartKubelet [2]num    `json:"pod_start_kubelet_p50_p99_s"` // kubelet_pod_start_duration_seconds
	StartSLI     [2]num    `json:"pod_start_sli_p50_p99_s"`     // kubelet_pod_start_sli_duration_seconds
	StartSeen    [2]num    `json:"pod_start_seen_p50_p99_s"`    // first Running in /pods - manifest written (1 s polls)
	StartStatus  [2]num    `json:"pod_start_status_p50_p99_s"`  // the runtime's started_at - the kubelet's config.seen
	// Observations of kubelet_pod_start_duration_seconds: two per pod, as
	// the kubelet also observes a pod at its first sync, while it has no status.
	StartKubeletN float64             `json:"pod_start_kubelet_count"`
	Ops           map[string][]op     `json:"cri_ops"`
	CPU           map[string]phaseCPU `json:"cpu"`
	PLEG          map[string]phase    `json:"pleg"`
	DaemonRSS     map[string]float64  `json:"daemon_rss_mb"` // idle, peak, running, after
	KubeletRSS    float64             `json:"kubelet_rss_mb"`
	Procs         []group             `json:"procs"`
	// CPU the per-pod processes (monitors and pause, shims and pause) used
	// in their lives, with their reaped children (libcontainer init, runc).
	PodProcsCPU  float64   `json:"pod_procs_cpu_s"`
	PSSPerPod    float64   `json:"runtime_pss_per_pod_mb"`
	ContainerPSS float64   `json:"container_pss_per_pod_mb"`
	Cgroups      cgroupMem `json:"pod_cgroups"`
	Teardown     float64   `json:"teardown_s"`
	ProcsAfter   []group   `json:"procs_after"`
	Leaks        int       `json:"leaks"`
}

// num is a figure that may be missing (NaN), which JSON cannot say: null.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(n))
}

func (n *num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = num(math.NaN())
		return nil
	}
	return json.Unmarshal(b, (*float64)(n))
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func run(ctx context.Context, log *slog.Logger, o *options, name string) (r *result, err error) {
	r = &result{FeatureGates: o.featureGates, Runtime: name, Pods: o.pods, LoadBefore: loadavg(), Started: time.Now().UTC(), PLEG: map[string]phase{}, Ops: map[string][]op{}, CPU: map[string]phaseCPU{}, DaemonRSS: map[string]float64{}}
	work, err := os.MkdirTemp("", "bdens.") // short: socket paths
	if err != nil {
		return nil, err
	}
	cgroupRoot := fmt.Sprintf("/bdens-%d-%s", os.Getpid(), name)
	h, err := snapshotHost(work, cgroupRoot)
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	defer func() {
		r.Leaks += h.restore(log)
		r.LoadAfter = loadavg()
		log.Info("host restored", "runtime", name, "leaks", r.Leaks)
	}()
	for _, d := range []string{"run", "tmp"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			return r, err
		}
	}
	// Volatile state on a tmpfs, as /run is on a node (this VM's /run is
	// on its ext4 disk).
	if err := unix.Mount("bdens-run", filepath.Join(work, "run"), "tmpfs", 0, "mode=0711,size=4g"); err != nil {
		return r, fmt.Errorf("mount the state tmpfs: %w", err)
	}
	if err := writeCNI(filepath.Join(work, "net.d"), filepath.Join(work, "run", "ipam")); err != nil {
		return r, err
	}
	if err := makeNodeIP(); err != nil {
		return r, err
	}
	if err := makeCgroupRoot(cgroupRoot); err != nil {
		return r, err
	}
	var d *daemon
	switch name {
	case "berth":
		d, err = berthDaemon(o, work)
	case "containerd":
		d, err = containerdDaemon(o, work)
	default:
		err = fmt.Errorf("unknown runtime %q (berth, containerd)", name)
	}
	if err != nil {
		return r, err
	}
	r.Version = runtimeharness.Version(d.Argv[0], "--version")
	if err := d.Start(ctx); err != nil {
		return r, err
	}
	defer func() { r.Leaks += d.stop(log) }()
	if err := d.pull(ctx); err != nil {
		return r, err
	}
	k, err := startKubelet(ctx, o, d, work, cgroupRoot)
	defer k.stop() // before the runtime's stop (deferred earlier)
	if err != nil {
		return r, err
	}
	log.Info("kubelet up", "runtime", name, "pid", k.cmd.Process.Pid, "load", loadavg())
	if err := sleep(ctx, o.idle); err != nil {
		return r, err
	}
	r.DaemonRSS["idle"] = mb(vmRSS(d.pid()))
	m0, err := k.metrics()
	if err != nil {
		return r, err
	}
	c0 := markCPU(d, k)

	// Start: every manifest at once, then /pods every second.
	written := map[string]time.Time{}
	t0 := time.Now()
	for i := range o.pods {
		n := fmt.Sprintf("d%03d", i)
		if err := k.writeManifest(n); err != nil {
			return r, err
		}
		written[n+"-bdens-node"] = time.Now()
	}
	seen := map[string]time.Time{}
	var last []*pod
	peak := int64(0)
	for deadline := t0.Add(o.timeout); len(seen) < o.pods; {
		if err := sleep(ctx, time.Second); err != nil {
			return r, err
		}
		if !k.running() {
			return r, fmt.Errorf("the kubelet exited; its log: %s", k.log)
		}
		peak = max(peak, vmRSS(d.pid()))
		pods, err := k.pods()
		if err != nil {
			log.Warn("GET /pods", "error", err)
			continue
		}
		last = pods
		now := time.Now()
		for _, p := range pods {
			if _, ok := seen[p.Metadata.Name]; !ok && p.running() {
				seen[p.Metadata.Name] = now
			}
		}
		if time.Now().After(deadline) {
			log.Error("not every pod Running before the timeout", "running", len(seen), "pods", o.pods)
			break
		}
	}
	r.Running = len(seen)
	ips := map[string]bool{}
	for _, p := range last {
		if p.running() && strings.HasPrefix(p.Status.PodIP, netPrefix) {
			ips[p.Status.PodIP] = true
		}
	}
	r.PodIPs = len(ips)
	r.AllRunning = time.Since(t0).Seconds()
	r.DaemonRSS["peak"] = mb(peak)
	log.Info("pods running", "runtime", name, "running", r.Running, "seconds", r.AllRunning, "load", loadavg())
	m1, err := k.metrics()
	if err != nil {
		return r, err
	}
	c1 := markCPU(d, k)
	r.CPU["start"] = c1.since(c0)
	var seenS, statusS []float64
	for n, at := range seen {
		seenS = append(seenS, at.Sub(written[n]).Seconds())
	}
	started, err := d.containerStarts(ctx)
	if err != nil {
		return r, err
	}
	for _, p := range last {
		at, err := time.Parse(time.RFC3339Nano, p.Metadata.Annotations["kubernetes.io/config.seen"])
		if s, ok := started[p.Metadata.UID]; ok && err == nil {
			statusS = append(statusS, s.Sub(at).Seconds())
		}
	}
	r.StartSeen = [2]num{num(report.Percentile(seenS, 0.5)), num(report.Percentile(seenS, 0.99))}
	r.StartStatus = [2]num{num(report.Percentile(statusS, 0.5)), num(report.Percentile(statusS, 0.99))}
	if h := m1.hists["kubelet_pod_start_duration_seconds"]; h != nil {
		d := h.sub(m0.hists["kubelet_pod_start_duration_seconds"])
		r.StartKubelet = [2]num{num(d.quantile(0.5)), num(d.quantile(0.99))}
		r.StartKubeletN = d.count
	}
	if h := m1.hists["kubelet_pod_start_sli_duration_seconds"]; h != nil {
		d := h.sub(m0.hists["kubelet_pod_start_sli_duration_seconds"])
		r.StartSLI = [2]num{num(d.quantile(0.5)), num(d.quantile(0.99))}
	}
	r.PLEG["start"] = plegPhase(m0, m1)
	r.Ops["start"] = opsPhase(m0, m1)

	// Steady: every pod running for a while; memory at the end of it.
	if err := sleep(ctx, o.steady); err != nil {
		return r, err
	}
	m2, err := k.metrics()
	if err != nil {
		return r, err
	}
	c2 := markCPU(d, k)
	r.CPU["running"] = c2.since(c1)
	r.PLEG["running"] = plegPhase(m1, m2)
	r.Ops["running"] = opsPhase(m1, m2)
	r.DaemonRSS["running"] = mb(vmRSS(d.pid()))
	r.KubeletRSS = mb(vmRSS(k.cmd.Process.Pid))
	var pss, cpss int64
	r.Procs, pss, cpss, r.PodProcsCPU = runtimeProcs(work, cgroupRoot, d.pid(), k.cmd.Process.Pid)
	if r.Running > 0 {
		r.PSSPerPod = mb(pss) / float64(r.Running)
		r.ContainerPSS = mb(cpss) / float64(r.Running)
	}
	r.Cgroups = podCgroups(cgroupRoot)
	log.Info("memory", "runtime", name, "daemon_rss_mb", r.DaemonRSS["running"], "runtime_pss_per_pod_mb", r.PSSPerPod, "procs", r.Procs, "cgroups", r.Cgroups)

	// Teardown: every manifest removed at once, until the runtime lists
	// no ready sandbox and no running container.
	t1 := time.Now()
	for i := range o.pods {
		os.Remove(filepath.Join(k.manifests, fmt.Sprintf("d%03d.yaml", i)))
	}
	for deadline := t1.Add(o.timeout); ; {
		if err := sleep(ctx, time.Second); err != nil {
			return r, err
		}
		ready, running, _, err := d.counts(ctx)
		if err != nil {
			log.Warn("list the runtime's pods", "error", err)
			continue
		}
		if ready == 0 && running == 0 {
			break
		}
		if time.Now().After(deadline) {
			log.Error("teardown not done before the timeout", "ready", ready, "running", running)
			break
		}
	}
	r.Teardown = time.Since(t1).Seconds()
	r.CPU["teardown"] = markCPU(d, k).since(c2)
	// The PLEG window of the teardown ends 10 s after it, so that it holds
	// the relists that saw the last stops.
	if err := sleep(ctx, 10*time.Second); err != nil {
		return r, err
	}
	m3, err := k.metrics()
	if err != nil {
		return r, err
	}
	r.PLEG["teardown"] = plegPhase(m2, m3)
	r.Ops["teardown"] = opsPhase(m2, m3)
	r.PLEG["all"] = plegPhase(m0, m3)
	r.DaemonRSS["after"] = mb(vmRSS(d.pid()))
	r.ProcsAfter, _, _, _ = runtimeProcs(work, cgroupRoot, d.pid(), k.cmd.Process.Pid)
	log.Info("torn down", "runtime", name, "seconds", r.Teardown, "daemon_rss_mb", r.DaemonRSS["after"], "procs_left", r.ProcsAfter, "load", loadavg())
	return r, nil
}

// op is the kubelet's CRI calls of one type over a phase
// (kubelet_runtime_operations_duration_seconds and _errors_total).
type op struct {
	Type   string  `json:"type"`
	Count  float64 `json:"count"`
	Mean   num     `json:"mean_s"`
	Over1s float64 `json:"over_1s"` // relists that took more than 1 s
	P99    num     `json:"p99_s"`
	Errors float64 `json:"errors"`
}

const opsName = "kubelet_runtime_operations_duration_seconds"

func opsPhase(before, after *metrics) []op {
	var out []op
	for key, h := range after.series {
		t, ok := strings.CutPrefix(key, opsName+`{operation_type="`)
		if !ok {
			continue
		}
		t = strings.TrimSuffix(t, `"}`)
		d := h.sub(before.series[key])
		if d.count == 0 {
			continue
		}
		ek := `kubelet_runtime_operations_errors_total{operation_type="` + t + `"}`
		out = append(out, op{Type: t, Count: d.count, Mean: num(d.sum / d.count), P99: num(d.quantile(0.99)), Errors: after.samples[ek] - before.samples[ek]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count*float64(out[i].Mean) > out[j].Count*float64(out[j].Mean) })
	return out
}

// phaseCPU is where the CPU went in one phase: the runtime daemon (and the
// children it reaped), the kubelet, and the whole machine's busy share.
type phaseCPU struct {
	Seconds float64 `json:"seconds"`
	Daemon  cpu     `json:"daemon"`
	Kubelet cpu     `json:"kubelet"`
	Busy    float64 `json:"machine_busy"` // fraction of all CPUs
}

type cpuMark struct {
	at              time.Time
	daemon, kubelet cpu
	busy, total     float64
}

func markCPU(d *daemon, k *kubelet) cpuMark {
	m := cpuMark{at: time.Now(), daemon: procCPU(d.pid()), kubelet: procCPU(k.cmd.Process.Pid)}
	m.busy, m.total = machineBusy()
	return m
}

func (m cpuMark) since(b cpuMark) phaseCPU {
	p := phaseCPU{Seconds: m.at.Sub(b.at).Seconds(), Daemon: m.daemon.sub(b.daemon), Kubelet: m.kubelet.sub(b.kubelet)}
	if m.total > b.total {
		p.Busy = (m.busy - b.busy) / (m.total - b.total)
	}
	return p
}

func plegPhase(before, after *metrics) phase {
	var p phase
	if h := after.hists["kubelet_pleg_relist_duration_seconds"]; h != nil {
		d := h.sub(before.hists["kubelet_pleg_relist_duration_seconds"])
		p.Relists, p.P50, p.P99, p.Mean = d.count, num(d.quantile(0.5)), num(d.quantile(0.99)), num(d.sum/d.count)
		for _, b := range d.buckets {
			if b.le == 1 {
				p.Over1s = d.count - b.count
			}
		}
	}
	// Its buckets (1, 2.5 s) are too coarse for a percentile: the mean.
	if h := after.hists["kubelet_pleg_relist_interval_seconds"]; h != nil {
		d := h.sub(before.hists["kubelet_pleg_relist_interval_seconds"])
		p.Interval = num(d.sum / d.count)
	}
	return p
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
