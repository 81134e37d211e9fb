// Command bench measures Container Runtime Interface (CRI) runtimes
// through their sockets, as the kubelet drives them:
//
//  1. pod start (RunPodSandbox + CreateContainer + StartContainer of a
//     busybox sleep, image present), sequentially over -n pods: p50/p90/p99;
//     and -c pods started at once: total time;
//  2. teardown (StopContainer + RemoveContainer + StopPodSandbox +
//     RemovePodSandbox), the same way;
//  3. ExecSync of `true` in a running container: p50/p99, back to back
//     and each after -exec-gap idle (as the kubelet's exec probes come:
//     a lone exec pays waits a burst shares, such as the RCU grace period
//     of the first cgroup migration);
//  4. ListPodSandbox and ListContainers with -list pods running;
//  5. memory: the daemon's RSS idle and with those pods, and the RSS and
//     PSS (/proc/PID/smaps_rollup) of every process the runtime added per
//     pod (shim or monitor, pause), found by diffing the process table:
//     new processes below the daemon, in a pod's cgroup, or naming a pod
//     id on their command line, minus the containers' own processes;
//  6. the pull time of -pull-image into a store that does not hold it.
//
// With several -endpoint flags every sample alternates between the
// runtimes (the order rotates), so that both see the same machine, and
// the table gives the first/second ratio of each figure.
//
//	bench -endpoint berth=unix:///run/berth/berth.sock -endpoint containerd=unix:///run/containerd/containerd.sock \
//	      -image docker.io/library/busybox:latest -pull-image docker.io/berth-test/big:latest -json out.json
//	bench table [-steps STEPS.json]... REPORT.json...   print the table of earlier runs
//	bench wait [-timeout 30s] unix:///path             wait until a runtime answers Version
//	bench timings [berth daemon flags] [-n N] [-json F] time berth's primitive steps with its own code
//	bench compare [flags]                               berth beside containerd, everything (hack/bench-compare)
//	bench density [flags]                               pod density under the stock kubelet (hack/density; package bench/density)
//	bench kind run|cri|archive [flags]                  kind clusters of both node images (hack/kind-bench; package bench/kind)
//
// Needs root (it reads other processes' smaps). Everything it starts is
// torn down on exit, also after a failure or SIGINT; it removes the cgroup
// parents it named and the pod log directories it made.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/bench/density"
	"github.com/berth-runtime/berth/bench/kind"
)

type endpointFlag []string

func (f *endpointFlag) String() string     { return strings.Join(*f, ",") }
func (f *endpointFlag) Set(v string) error { *f = append(*f, v); return nil }

// Params are the run's settings, recorded in the report.
type Params struct {
	Image         string `json:"image"`
	PullImage     string `json:"pull_image"`
	PullSamples   int    `json:"pull_samples"`
	Sequential    int    `json:"sequential_pods"`
	Warmup        int    `json:"warmup_pods"`
	Concurrent    int    `json:"concurrent_pods"`
	ConcReps      int    `json:"concurrent_reps"`
	Execs         int    `json:"execs"`
	LoneExecs     int    `json:"lone_execs"`
	ExecGapMS     int    `json:"exec_gap_ms"`
	ListPods      []int  `json:"list_pods"`
	ListSamples   int    `json:"list_samples"`
	ScaleWorkers  int    `json:"scale_workers"`
	Phases        string `json:"phases"`
	CgroupRoot    string `json:"cgroup_root"`
	SettleSeconds int    `json:"settle_seconds"`
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("bench: ")
	if len(os.Args) > 1 {
		if code, ok := subcommand(os.Args[1], os.Args[2:]); ok {
			os.Exit(code)
		}
	}
	var eps endpointFlag
	var p Params
	var listPods, jsonOut, label, targets, pids, logs string
	flag.Var(&eps, "endpoint", "NAME=unix:///path of a CRI runtime (repeatable; ratios are first/second)")
	flag.StringVar(&p.Image, "image", "docker.io/library/busybox:latest", "image of the benchmark containers (needs sleep and true)")
	flag.StringVar(&p.PullImage, "pull-image", "", "image whose pull is timed (removed before each pull); empty skips the pull figure")
	flag.IntVar(&p.PullSamples, "pull-samples", 3, "pulls per runtime")
	flag.IntVar(&p.Sequential, "n", 20, "pods started one at a time (then torn down one at a time)")
	flag.IntVar(&p.Warmup, "warmup", 1, "pods started and torn down per runtime before anything is timed")
	flag.IntVar(&p.Concurrent, "c", 10, "pods started at once")
	flag.IntVar(&p.ConcReps, "c-reps", 3, "repetitions of the concurrent start")
	flag.IntVar(&p.Execs, "execs", 50, "ExecSync calls per runtime, back to back")
	flag.IntVar(&p.LoneExecs, "lone-execs", 20, "ExecSync calls per runtime, each after -exec-gap-ms idle")
	flag.IntVar(&p.ExecGapMS, "exec-gap-ms", 250, "idle time before each lone ExecSync (ms)")
	flag.StringVar(&listPods, "list", "100,250", "pod counts at which List latency and memory are measured")
	flag.IntVar(&p.ListSamples, "list-samples", 100, "calls of each List per pod count")
	flag.IntVar(&p.ScaleWorkers, "scale-workers", 4, "pods started or torn down at once while filling up to the -list counts")
	flag.IntVar(&p.SettleSeconds, "settle", 2, "seconds to wait at each -list count before measuring")
	flag.StringVar(&p.Phases, "phases", "pull,start,exec,concurrent,scale", "phases to run")
	flag.StringVar(&p.CgroupRoot, "cgroup-root", "", "cgroupfs parent of the pods' cgroups (default /berth-bench-PID)")
	flag.StringVar(&jsonOut, "json", "", "write the report here")
	flag.StringVar(&label, "label", "", "what this run is (e.g. the CNI chain), shown in the table")
	flag.StringVar(&targets, "targets", "", "targets to check in the table: plain (no portmap), portmap, or empty for none")
	flag.StringVar(&pids, "pid", "", "NAME=PID,...: daemon pids (default: the process listening on the socket)")
	flag.StringVar(&logs, "log", "", "NAME=PATH,...: a berth daemon's log, from which the times of its steps inside the sequential pods' RunPodSandbox and StopPodSandbox are read")
	flag.Parse()
	if len(eps) == 0 {
		log.Fatal("at least one -endpoint NAME=unix:///path is required")
	}
	for _, s := range strings.Split(listPods, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			log.Fatalf("-list: bad pod count %q", s)
		}
		p.ListPods = append(p.ListPods, n)
	}
	slices.Sort(p.ListPods)
	if p.CgroupRoot == "" {
		p.CgroupRoot = fmt.Sprintf("/berth-bench-%d", os.Getpid())
	}
	if _, ok := targetSets[targets]; !ok {
		log.Fatalf("-targets: want plain, portmap or empty, got %q", targets)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, eps, p, pids, logs)
	if rep != nil {
		rep.Label, rep.Targets = label, targets
		if jsonOut != "" {
			if werr := writeReport(jsonOut, rep); werr != nil {
				log.Print(werr)
			}
		}
		if err == nil {
			printTable(os.Stdout, []*Report{rep}, nil)
		}
	}
	if err != nil {
		log.Fatal(err)
	}
}

// subcommand runs the subcommand name, if there is one of that name, and
// returns its exit status; without one, the arguments are the benchmark's.
func subcommand(name string, args []string) (int, bool) {
	commands := map[string]func([]string) error{
		"table": tableCommand, "push-layer": pushLayerCommand, "timings": timingsCommand, "wait": waitCommand,
	}
	switch name {
	case "density":
		return density.Main(args), true
	case "kind":
		return kind.Main(args), true
	case "compare":
		if err := compareCommand(args); err != nil {
			log.Print(err)
			return compareExitCode(err), true
		}
		return 0, true
	}
	f, ok := commands[name]
	if !ok {
		return 0, false
	}
	if err := f(args); err != nil {
		log.Print(err)
		return 1, true
	}
	return 0, true
}

type bench struct {
	p    Params
	eps  []*endpoint
	spec podSpec
}

func run(ctx context.Context, addrs []string, p Params, pidFlag, logFlag string) (*Report, error) {
	logRoot, err := os.MkdirTemp("", "berth-bench-logs.")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(logRoot)
	b := &bench{p: p, spec: podSpec{namespace: "bench", cgroupRoot: p.CgroupRoot, logRoot: logRoot, image: p.Image}}
	logPaths := map[string]string{}
	for _, kv := range strings.Split(logFlag, ",") {
		if name, path, ok := strings.Cut(kv, "="); ok {
			logPaths[name] = path
		}
	}
	pidOverride := map[string]int{}
	for _, kv := range strings.Split(pidFlag, ",") {
		if name, v, ok := strings.Cut(kv, "="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("-pid %q: %w", kv, err)
			}
			pidOverride[name] = n
		}
	}
	rep := &Report{
		Date: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU(), Kernel: kernel(),
		Params: p, Results: map[string]*Result{},
	}
	for _, a := range addrs {
		name, addr, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-endpoint %q: want NAME=unix:///path", a)
		}
		e, err := dial(name, addr)
		if err != nil {
			return nil, err
		}
		defer e.conn.Close()
		b.eps = append(b.eps, e)
		rep.Runtimes = append(rep.Runtimes, name)
		rep.Results[name] = e.res
	}
	// Whatever happens, tear down what was started, then remove the
	// cgroup parents the pods were given.
	defer b.cleanup()

	for _, e := range b.eps {
		vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		v, err := e.rt.Version(vctx, &runtimeapi.VersionRequest{})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: Version: %w", e.name, err)
		}
		e.res.Version = v.RuntimeName + " " + v.RuntimeVersion
		if pid, ok := pidOverride[e.name]; ok {
			e.pid = pid
		} else if e.pid, err = socketOwner(e.socket); err != nil {
			return nil, fmt.Errorf("%s: find the daemon: %w", e.name, err)
		}
		e.res.DaemonPID = e.pid
		e.log = logPaths[e.name]
		if kb, err := vmRSSKB(e.pid); err == nil {
			e.res.DaemonRSSIdleMB = float64(kb) / 1024
		}
		log.Printf("%s: %s, daemon pid %d, RSS %.1f MB", e.name, e.res.Version, e.pid, e.res.DaemonRSSIdleMB)
	}
	phases := map[string]bool{}
	for _, ph := range strings.Split(p.Phases, ",") {
		phases[strings.TrimSpace(ph)] = true
	}
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"pull", b.pullPhase},
		{"image", b.imagePhase},
		{"start", b.sequentialPhase},
		{"concurrent", b.concurrentPhase},
		{"scale", b.scalePhase},
	}
	for _, s := range steps {
		if s.name != "image" && !phases[s.name] {
			continue
		}
		if s.name == "pull" && p.PullImage == "" {
			continue
		}
		start := time.Now()
		if err := s.f(ctx); err != nil {
			return rep, fmt.Errorf("%s phase: %w", s.name, err)
		}
		log.Printf("%s phase done in %s", s.name, time.Since(start).Round(time.Millisecond))
	}
	return rep, nil
}

// order rotates the endpoints by i, so that no runtime always goes first.
func (b *bench) order(i int) []*endpoint {
	n := len(b.eps)
	out := make([]*endpoint, n)
	for j := range n {
		out[j] = b.eps[(i+j)%n]
	}
	return out
}

func rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 4*time.Minute)
}

func (b *bench) pullPhase(ctx context.Context) error {
	samples := map[*endpoint][]float64{}
	for i := range b.p.PullSamples {
		for _, e := range b.order(i) {
			c, cancel := rpcCtx(ctx)
			err := e.removeImage(c, b.p.PullImage)
			if err == nil {
				start := time.Now()
				_, err = e.pull(c, b.p.PullImage)
				samples[e] = append(samples[e], time.Since(start).Seconds())
			}
			cancel()
			if err != nil {
				return err
			}
		}
	}
	for _, e := range b.eps {
		d := newDist(samples[e])
		e.res.Pull = &d
		c, cancel := rpcCtx(ctx)
		err := e.removeImage(c, b.p.PullImage)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// imagePhase makes sure every runtime has the container image, as the
// kubelet does before creating containers, and resolves it to an id.
func (b *bench) imagePhase(ctx context.Context) error {
	for _, e := range b.eps {
		c, cancel := rpcCtx(ctx)
		ref, err := e.pull(c, b.p.Image)
		cancel()
		if err != nil {
			return err
		}
		e.image = ref
	}
	return nil
}

func (b *bench) sequentialPhase(ctx context.Context) error {
	for i := range b.p.Warmup {
		for _, e := range b.order(i) {
			c, cancel := rpcCtx(ctx)
			p, _, err := e.startPod(c, &b.spec, fmt.Sprintf("warmup-%d", i))
			if err == nil {
				_, err = e.stopPod(c, p)
			}
			cancel()
			if err != nil {
				return err
			}
		}
	}
	type acc struct {
		start, teardown []float64
		startSteps      [3][]float64
		stopSteps       [4][]float64
		exec, loneExec  []float64
		pods            []*pod
	}
	a := map[*endpoint]*acc{}
	for _, e := range b.eps {
		a[e] = &acc{}
	}
	for i := range b.p.Sequential {
		for _, e := range b.order(i) {
			c, cancel := rpcCtx(ctx)
			p, d, err := e.startPod(c, &b.spec, fmt.Sprintf("seq-%d", i))
			cancel()
			if err != nil {
				return err
			}
			x := a[e]
			x.pods = append(x.pods, p)
			x.start = append(x.start, ms(d[0]+d[1]+d[2]))
			for j := range d {
				x.startSteps[j] = append(x.startSteps[j], ms(d[j]))
			}
		}
	}
	// execs times n ExecSync calls per runtime, each after gap idle.
	execs := func(n int, gap time.Duration, times func(*acc) *[]float64) error {
		for i := range n {
			for _, e := range b.order(i) {
				x := a[e]
				time.Sleep(gap)
				el, err := e.execTrue(ctx, x.pods[i%len(x.pods)])
				if err != nil {
					return err
				}
				*times(x) = append(*times(x), ms(el))
			}
		}
		return nil
	}
	if err := execs(b.p.Execs, 0, func(x *acc) *[]float64 { return &x.exec }); err != nil {
		return err
	}
	if err := execs(b.p.LoneExecs, time.Duration(b.p.ExecGapMS)*time.Millisecond, func(x *acc) *[]float64 { return &x.loneExec }); err != nil {
		return err
	}
	for i := range b.p.Sequential {
		for _, e := range b.order(i) {
			x := a[e]
			c, cancel := rpcCtx(ctx)
			d, err := e.stopPod(c, x.pods[i])
			cancel()
			if err != nil {
				return err
			}
			x.teardown = append(x.teardown, ms(d[0]+d[1]+d[2]+d[3]))
			for j := range d {
				x.stopSteps[j] = append(x.stopSteps[j], ms(d[j]))
			}
		}
	}
	for _, e := range b.eps {
		x := a[e]
		e.res.PodStart = distPtr(x.start)
		e.res.Teardown = distPtr(x.teardown)
		e.res.StartSteps = map[string]*Dist{}
		for j, n := range []string{"RunPodSandbox", "CreateContainer", "StartContainer"} {
			e.res.StartSteps[n] = distPtr(x.startSteps[j])
		}
		e.res.TeardownSteps = map[string]*Dist{}
		for j, n := range []string{"StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"} {
			e.res.TeardownSteps[n] = distPtr(x.stopSteps[j])
		}
		if len(x.exec) > 0 {
			e.res.Exec = distPtr(x.exec)
		}
		if len(x.loneExec) > 0 {
			e.res.LoneExec = distPtr(x.loneExec)
		}
		if e.log != "" {
			ids := map[string]bool{}
			for _, p := range x.pods {
				ids[p.id] = true
			}
			steps, err := berthSteps(e.log, ids)
			if err != nil {
				return fmt.Errorf("%s: %w", e.name, err)
			}
			e.res.InPath = steps
		}
	}
	return nil
}

func distPtr(v []float64) *Dist {
	d := newDist(v)
	return &d
}

// parallel runs f for 0..n-1 with at most workers at once and returns the
// first error.
func parallel(n, workers int, f func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, max(workers, 1))
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func (b *bench) concurrentPhase(ctx context.Context) error {
	starts, stops := map[*endpoint][]float64{}, map[*endpoint][]float64{}
	for r := range b.p.ConcReps {
		for _, e := range b.order(r) {
			pods := make([]*pod, b.p.Concurrent)
			begin := time.Now()
			err := parallel(b.p.Concurrent, b.p.Concurrent, func(i int) error {
				c, cancel := rpcCtx(ctx)
				defer cancel()
				p, _, err := e.startPod(c, &b.spec, fmt.Sprintf("conc-%d-%d", r, i))
				pods[i] = p
				return err
			})
			if err != nil {
				return err
			}
			starts[e] = append(starts[e], ms(time.Since(begin)))
			begin = time.Now()
			err = parallel(b.p.Concurrent, b.p.Concurrent, func(i int) error {
				c, cancel := rpcCtx(ctx)
				defer cancel()
				_, err := e.stopPod(c, pods[i])
				return err
			})
			if err != nil {
				return err
			}
			stops[e] = append(stops[e], ms(time.Since(begin)))
		}
	}
	for _, e := range b.eps {
		e.res.Concurrent = b.p.Concurrent
		e.res.ConcurrentStart = distPtr(starts[e])
		e.res.ConcurrentTeardown = distPtr(stops[e])
	}
	return nil
}

// scalePhase fills each runtime in turn up to every -list count, measures
// List latency and memory there, then tears everything down. The other
// runtimes stay idle meanwhile.
func (b *bench) scalePhase(ctx context.Context) error {
	if len(b.p.ListPods) == 0 {
		return nil
	}
	for _, e := range b.eps {
		before := procSet(allProcs())
		var pods []*pod
		var mu sync.Mutex
		workload := map[int]bool{}
		for _, target := range b.p.ListPods {
			from := len(pods)
			begin := time.Now()
			err := parallel(target-from, b.p.ScaleWorkers, func(i int) error {
				c, cancel := rpcCtx(ctx)
				defer cancel()
				p, _, err := e.startPod(c, &b.spec, fmt.Sprintf("scale-%d", from+i))
				if err != nil {
					return err
				}
				pid, err := e.containerPid(c, p.ctr)
				if err != nil {
					return err
				}
				mu.Lock()
				pods = append(pods, p)
				workload[pid] = true
				mu.Unlock()
				return nil
			})
			if err != nil {
				return err
			}
			log.Printf("%s: %d pods running (+%d in %s)", e.name, len(pods), target-from, time.Since(begin).Round(time.Millisecond))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(b.p.SettleSeconds) * time.Second):
			}
			pt := ScalePoint{Pods: len(pods)}
			if kb, err := vmRSSKB(e.pid); err == nil {
				pt.DaemonRSSMB = float64(kb) / 1024
			}
			b.perPod(e, &pt, before, pods, workload)
			if err := b.listLatency(ctx, e, &pt); err != nil {
				return err
			}
			e.res.Scale = append(e.res.Scale, pt)
			log.Printf("%s at %d pods: daemon RSS %.1f MB, per pod RSS %.2f MB PSS %.2f MB, ListPodSandbox p50 %.2f ms, ListContainers p50 %.2f ms",
				e.name, pt.Pods, pt.DaemonRSSMB, pt.PerPodRSSMB, pt.PerPodPSSMB, pt.ListPodSandbox.P50, pt.ListContainers.P50)
		}
		begin := time.Now()
		err := parallel(len(pods), b.p.ScaleWorkers, func(i int) error {
			c, cancel := rpcCtx(ctx)
			defer cancel()
			_, err := e.stopPod(c, pods[i])
			return err
		})
		if err != nil {
			return err
		}
		log.Printf("%s: %d pods torn down in %s", e.name, len(pods), time.Since(begin).Round(time.Millisecond))
	}
	return nil
}

// perPod sums the memory of the processes the runtime added for its pods.
func (b *bench) perPod(e *endpoint, pt *ScalePoint, before map[procKey]bool, pods []*pod, workload map[int]bool) {
	ids := map[string]bool{}
	for _, p := range pods {
		ids[p.id] = true
	}
	ps := allProcs()
	daemon := map[int]bool{e.pid: true}
	groups := map[string]*ProcGroup{}
	var rss, pss uint64
	for _, p := range ps {
		if before[p.key()] || p.pid == e.pid || p.pid == os.Getpid() || descendsFrom(ps, p.pid, workload) {
			continue
		}
		related := descendsFrom(ps, p.pid, daemon) || strings.Contains(cgroupLines(p.pid), b.p.CgroupRoot+"/")
		if !related {
			for _, arg := range cmdline(p.pid) {
				_, v, _ := strings.Cut(arg, "=")
				if ids[arg] || ids[v] {
					related = true
					break
				}
			}
		}
		if !related {
			continue
		}
		r, s, err := memKB(p.pid)
		if err != nil {
			continue
		}
		rss += r
		pss += s
		g := groups[p.comm]
		if g == nil {
			g = &ProcGroup{Comm: p.comm}
			groups[p.comm] = g
		}
		g.Count++
		g.RSSMB += float64(r) / 1024
		g.PSSMB += float64(s) / 1024
	}
	n := float64(len(pods))
	pt.PerPodRSSMB = float64(rss) / 1024 / n
	pt.PerPodPSSMB = float64(pss) / 1024 / n
	for _, g := range groups {
		pt.Processes = append(pt.Processes, *g)
	}
	slices.SortFunc(pt.Processes, func(a, b ProcGroup) int { return strings.Compare(a.Comm, b.Comm) })
}

func (b *bench) listLatency(ctx context.Context, e *endpoint, pt *ScalePoint) error {
	var sandboxes, containers []float64
	for range b.p.ListSamples {
		c, cancel := rpcCtx(ctx)
		start := time.Now()
		ps, err := e.rt.ListPodSandbox(c, &runtimeapi.ListPodSandboxRequest{})
		sandboxes = append(sandboxes, ms(time.Since(start)))
		if err == nil {
			start = time.Now()
			var cs *runtimeapi.ListContainersResponse
			cs, err = e.rt.ListContainers(c, &runtimeapi.ListContainersRequest{})
			containers = append(containers, ms(time.Since(start)))
			if err == nil && (len(ps.Items) < pt.Pods || len(cs.Containers) < pt.Pods) {
				err = fmt.Errorf("listed %d pods and %d containers, want at least %d", len(ps.Items), len(cs.Containers), pt.Pods)
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s: List: %w", e.name, err)
		}
	}
	pt.ListPodSandbox, pt.ListContainers = distPtr(sandboxes), distPtr(containers)
	return nil
}

// cleanup tears down every pod still running (a failed or interrupted
// run), then removes the cgroup parents named after -cgroup-root.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, e := range b.eps {
		live := e.livePods()
		if len(live) > 0 {
			log.Printf("%s: tearing down %d pods left running", e.name, len(live))
		}
		parallel(len(live), 4, func(i int) error {
			if _, err := e.stopPod(ctx, live[i]); err != nil {
				log.Printf("cleanup: %v", err)
			}
			return nil
		})
	}
	if err := removeCgroupTree(b.p.CgroupRoot); err != nil {
		log.Printf("cleanup: %v", err)
	}
}

// removeCgroupTree removes the (empty) cgroup directories at path in every
// mounted hierarchy, deepest first. The runtimes remove their pods' own
// cgroups; the per-pod parents are the bench's to remove.
func removeCgroupTree(path string) error {
	if path == "" || path == "/" {
		return nil
	}
	roots, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, root := range roots {
		top := filepath.Join(root, path)
		var dirs []string
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

func cgroupMounts() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[2] == "cgroup" || f[2] == "cgroup2") {
			out = append(out, f[1])
		}
	}
	return out, nil
}

func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// waitCommand waits until the runtime at the endpoint answers Version.
func waitCommand(args []string) error {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: bench wait [-timeout D] unix:///path")
	}
	e, err := dial("runtime", fs.Arg(0))
	if err != nil {
		return err
	}
	defer e.conn.Close()
	deadline := time.Now().Add(*timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := e.rt.Version(ctx, &runtimeapi.VersionRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not answer after %s: %w", fs.Arg(0), *timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
