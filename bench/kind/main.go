// Package kind is `bench kind`: it measures what a kind user feels on
// clusters of berth's node image beside its containerd twin, alternating
// the images round by round, and prints one table with the ratios of the
// first image to the second. hack/kind-bench builds what it needs and runs
// it.
//
//	bench kind run -image berth=TAG -image containerd=TAG -rounds N ...
//	bench kind cri [-endpoint SOCK] [-n N]   (inside a node: pod start at the CRI socket)
//	bench kind archive -images current.json -name big -tag REF  (an OCI layout as a docker-archive, for `docker load`)
//
// Per round and image, on a fresh 1 control plane + 2 workers cluster:
// `kind create cluster` to every node Ready and to CoreDNS ready; each node
// container's memory (its cgroup, working set as `docker stats` counts it:
// usage minus inactive file cache) after -idle; a Deployment of -replicas
// pods of the preloaded pause image spread over the workers: to all Ready,
// and to all gone after its delete; `kind load docker-image` of the 100 MB
// test image to both workers; the p50 of pod start (RunPodSandbox +
// CreateContainer + StartContainer) at the CRI socket inside a worker.
// Every cluster it creates is deleted, also on failure or SIGINT.
package kind

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Main runs `bench kind` with args (what follows "kind") and returns the
// exit status.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(args) < 1 {
		err = errors.New("usage: bench kind run|cri|archive [flags]")
	} else {
		switch args[0] {
		case "run":
			err = run(ctx, args[1:])
		case "cri":
			err = runCRI(ctx, args[1:])
		case "archive":
			err = runArchive(args[1:])
		default:
			err = fmt.Errorf("unknown command %q (run, cri, archive)", args[0])
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench kind: %v\n", err)
		return 1
	}
	return 0
}

type imageFlag [][2]string

func (f *imageFlag) String() string { return fmt.Sprint(*f) }
func (f *imageFlag) Set(v string) error {
	name, tag, ok := strings.Cut(v, "=")
	if !ok || name == "" || tag == "" {
		return fmt.Errorf("want NAME=TAG, got %q", v)
	}
	*f = append(*f, [2]string{name, tag})
	return nil
}

type config struct {
	kind, kubectl, self string
	images              imageFlag
	rounds, replicas    int
	idle                time.Duration
	loadImage           string // a Docker image, `kind load`ed to both workers
	podImage            string // preloaded in both node images
	criN                int
	out                 string
}

// sample is one round of one image.
type sample struct {
	Image, Tag, Cluster string
	Round               int
	NodesReadyS         float64            `json:"nodes_ready_s"`
	CoreDNSReadyS       float64            `json:"coredns_ready_s"`
	MemMiB              map[string]float64 `json:"mem_mib"`  // node role -> working set
	AnonMiB             map[string]float64 `json:"anon_mib"` // node role -> anonymous memory (rss)
	RolloutS            float64            `json:"rollout_s"`
	DeleteS             float64            `json:"delete_s"`
	KindLoadS           float64            `json:"kind_load_s"`
	PodStartP50MS       float64            `json:"pod_start_p50_ms"`
}

func run(ctx context.Context, args []string) error {
	var c config
	fs := flag.NewFlagSet("bench kind run", flag.ContinueOnError)
	fs.StringVar(&c.kind, "kind", "kind", "the kind binary")
	fs.StringVar(&c.kubectl, "kubectl", "kubectl", "the kubectl binary")
	fs.Var(&c.images, "image", "NAME=TAG of a node image (twice: ratios are first/second)")
	fs.IntVar(&c.rounds, "rounds", 2, "rounds; each creates one cluster per image")
	fs.IntVar(&c.replicas, "replicas", 30, "replicas of the Deployment")
	fs.DurationVar(&c.idle, "idle", 2*time.Minute, "idle time after CoreDNS is ready, before the memory is read")
	fs.StringVar(&c.loadImage, "load-image", "", "a Docker image to `kind load docker-image` into both workers (required)")
	fs.StringVar(&c.podImage, "pod-image", "registry.k8s.io/pause:3.10.2", "the Deployment's and the CRI pods' image, preloaded in the nodes")
	fs.IntVar(&c.criN, "cri-n", 20, "pods started at the CRI socket in a worker")
	fs.StringVar(&c.out, "out", "", "directory for samples.json and table.md (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(c.images) != 2 || c.loadImage == "" || c.out == "" {
		return errors.New("want two -image NAME=TAG, -load-image and -out")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c.self = self
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	var samples []sample
	for r := 1; r <= c.rounds; r++ {
		// The order alternates: whichever image goes first in a round
		// goes second in the next.
		order := slices.Clone(c.images)
		if r%2 == 0 {
			slices.Reverse(order)
		}
		for _, im := range order {
			s, err := c.round(ctx, im[0], im[1], r)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, im[0], err)
			}
			samples = append(samples, s)
			data, _ := json.MarshalIndent(samples, "", "  ")
			if err := os.WriteFile(filepath.Join(c.out, "samples.json"), data, 0o644); err != nil {
				return err
			}
		}
	}
	table := c.table(samples)
	fmt.Print(table)
	return os.WriteFile(filepath.Join(c.out, "table.md"), []byte(table), 0o644)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench kind: "+format+"\n", args...)
}

// round creates a cluster of the image, measures it and deletes it.
func (c *config) round(ctx context.Context, name, tag string, r int) (sample, error) {
	s := sample{Image: name, Tag: tag, Round: r, Cluster: fmt.Sprintf("kb-%s-%d", name, r),
		MemMiB: map[string]float64{}, AnonMiB: map[string]float64{}}
	dir, err := os.MkdirTemp("", "kindbench-")
	if err != nil {
		return s, err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n- role: worker\n- role: worker\n"), 0o644); err != nil {
		return s, err
	}
	defer func() {
		// Not the round's context: a SIGINT must still delete the cluster.
		if out, err := exec.Command(c.kind, "delete", "cluster", "--name", s.Cluster, "--kubeconfig", kubeconfig).CombinedOutput(); err != nil {
			logf("delete cluster %s: %v: %s", s.Cluster, err, out)
		}
	}()
	kubectl := func(args ...string) (string, error) {
		return output(ctx, nil, c.kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	}

	logf("round %d: creating %s from %s", r, s.Cluster, tag)
	t0 := time.Now()
	if _, err := output(ctx, nil, c.kind, "create", "cluster", "--name", s.Cluster, "--image", tag, "--config", cfg, "--kubeconfig", kubeconfig); err != nil {
		return s, err
	}
	if err := poll(ctx, 10*time.Minute, func() (bool, error) {
		out, err := kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		return err == nil && strings.Count(out, "True") == 3, nil
	}); err != nil {
		return s, fmt.Errorf("nodes Ready: %w", err)
	}
	s.NodesReadyS = time.Since(t0).Seconds()
	if err := poll(ctx, 10*time.Minute, func() (bool, error) {
		out, err := kubectl("-n", "kube-system", "get", "deployment", "coredns", "-o", "jsonpath={.status.readyReplicas}/{.spec.replicas}")
		ready, want, _ := strings.Cut(out, "/")
		return err == nil && ready != "" && ready == want, nil
	}); err != nil {
		return s, fmt.Errorf("CoreDNS ready: %w", err)
	}
	s.CoreDNSReadyS = time.Since(t0).Seconds()
	logf("%s: nodes Ready %.1fs, CoreDNS ready %.1fs; idle %s", s.Cluster, s.NodesReadyS, s.CoreDNSReadyS, c.idle)

	select {
	case <-time.After(c.idle):
	case <-ctx.Done():
		return s, ctx.Err()
	}
	for _, node := range []string{"control-plane", "worker", "worker2"} {
		ws, anon, err := nodeMemory(ctx, s.Cluster+"-"+node)
		if err != nil {
			return s, err
		}
		s.MemMiB[node], s.AnonMiB[node] = ws, anon
	}

	if s.RolloutS, s.DeleteS, err = c.rollout(ctx, kubeconfig); err != nil {
		return s, err
	}
	logf("%s: memory %v MiB (anon %v); rollout of %d %.1fs, gone %.1fs", s.Cluster, s.MemMiB, s.AnonMiB, c.replicas, s.RolloutS, s.DeleteS)

	t := time.Now()
	if _, err := output(ctx, nil, c.kind, "load", "docker-image", c.loadImage, "--name", s.Cluster,
		"--nodes", s.Cluster+"-worker,"+s.Cluster+"-worker2"); err != nil {
		return s, err
	}
	s.KindLoadS = time.Since(t).Seconds()

	if s.PodStartP50MS, err = c.criStart(ctx, s.Cluster+"-worker"); err != nil {
		return s, err
	}
	logf("%s: kind load %.1fs, CRI pod start p50 %.1fms", s.Cluster, s.KindLoadS, s.PodStartP50MS)
	return s, nil
}

// rollout times a Deployment to all replicas Ready, then its delete to all
// its pods gone from the API server.
func (c *config) rollout(ctx context.Context, kubeconfig string) (float64, float64, error) {
	kubectl := func(args ...string) (string, error) {
		return output(ctx, nil, c.kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	}
	manifest := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: kindbench}
spec:
  replicas: %d
  selector: {matchLabels: {app: kindbench}}
  template:
    metadata: {labels: {app: kindbench}}
    spec:
      containers:
      - {name: pause, image: %q, imagePullPolicy: Never}
`, c.replicas, c.podImage)
	t := time.Now()
	if _, err := output(ctx, strings.NewReader(manifest), c.kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-"); err != nil {
		return 0, 0, err
	}
	want := strconv.Itoa(c.replicas)
	if err := poll(ctx, 10*time.Minute, func() (bool, error) {
		out, err := kubectl("get", "deployment", "kindbench", "-o", "jsonpath={.status.readyReplicas}")
		return err == nil && out == want, nil
	}); err != nil {
		return 0, 0, fmt.Errorf("rollout: %w", err)
	}
	rollout := time.Since(t).Seconds()
	t = time.Now()
	if _, err := kubectl("delete", "deployment", "kindbench", "--wait=false"); err != nil {
		return 0, 0, err
	}
	if err := poll(ctx, 10*time.Minute, func() (bool, error) {
		out, err := kubectl("get", "pods", "-l", "app=kindbench", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", nil
	}); err != nil {
		return 0, 0, fmt.Errorf("delete: %w", err)
	}
	return rollout, time.Since(t).Seconds(), nil
}

// criStart copies this program into the node and runs `bench kind cri`
// there, with the node's kubelet stopped meanwhile: it sees every sandbox
// the runtime lists and kills those of pods it was not given, within a
// second or two, which races the benchmark's pods.
func (c *config) criStart(ctx context.Context, node string) (float64, error) {
	if _, err := output(ctx, nil, "docker", "cp", c.self, node+":/usr/local/bin/bench"); err != nil {
		return 0, err
	}
	if _, err := output(ctx, nil, "docker", "exec", node, "systemctl", "stop", "kubelet"); err != nil {
		return 0, err
	}
	out, err := output(ctx, nil, "docker", "exec", node, "/usr/local/bin/bench", "kind", "cri",
		"-image", c.podImage, "-n", strconv.Itoa(c.criN))
	if _, serr := output(ctx, nil, "docker", "exec", node, "systemctl", "start", "kubelet"); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return 0, err
	}
	var res criResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return 0, fmt.Errorf("bench kind cri in %s said %q: %w", node, out, err)
	}
	return median(res.StartMS), nil
}

// nodeMemory reads a node container's cgroup, on cgroup v1 or v2: its
// working set (usage minus inactive file cache, as `docker stats` counts
// it) and its anonymous memory (rss), which no page cache blurs.
func nodeMemory(ctx context.Context, node string) (float64, float64, error) {
	id, err := output(ctx, nil, "docker", "inspect", "--format", "{{.Id}}", node)
	if err != nil {
		return 0, 0, err
	}
	id = strings.TrimSpace(id)
	for _, d := range []string{
		"/sys/fs/cgroup/memory/docker/" + id, "/sys/fs/cgroup/memory/system.slice/docker-" + id + ".scope",
		"/sys/fs/cgroup/docker/" + id, "/sys/fs/cgroup/system.slice/docker-" + id + ".scope",
	} {
		usageFile, inactiveKey, anonKey := filepath.Join(d, "memory.usage_in_bytes"), "total_inactive_file", "total_rss"
		if _, err := os.Stat(usageFile); err != nil {
			usageFile, inactiveKey, anonKey = filepath.Join(d, "memory.current"), "inactive_file", "anon"
			if _, err := os.Stat(usageFile); err != nil {
				continue
			}
		}
		usage, err := readInt(usageFile)
		if err != nil {
			return 0, 0, err
		}
		stat, err := os.ReadFile(filepath.Join(d, "memory.stat"))
		if err != nil {
			return 0, 0, err
		}
		var inactive, anon int64
		for _, line := range strings.Split(string(stat), "\n") {
			k, v, _ := strings.Cut(line, " ")
			switch k {
			case inactiveKey:
				inactive, _ = strconv.ParseInt(v, 10, 64)
			case anonKey:
				anon, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return float64(usage-inactive) / (1 << 20), float64(anon) / (1 << 20), nil
	}
	return 0, 0, fmt.Errorf("no memory cgroup found for node %s (%s)", node, id)
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// poll calls f every 250 ms until it says done, for at most timeout.
func poll(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := f()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// output runs a command and returns its stdout; stderr goes to the error.
func output(ctx context.Context, stdin *strings.Reader, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// table renders the samples: per figure the median over the rounds of
// each image, and the ratio of the first image to the second, against the
// issue's target where it sets one.
func (c *config) table(samples []sample) string {
	a, b := c.images[0][0], c.images[1][0]
	rows := []struct {
		name, unit, target string
		get                func(sample) float64
	}{
		{"`kind create cluster` to all 3 nodes Ready", "s", "<= 0.9", func(s sample) float64 { return s.NodesReadyS }},
		{"`kind create cluster` to CoreDNS ready", "s", "<= 0.9", func(s sample) float64 { return s.CoreDNSReadyS }},
		{"control plane memory, idle", "MiB", "", func(s sample) float64 { return s.MemMiB["control-plane"] }},
		{"worker memory, idle (mean of 2)", "MiB", "<= 0.7", func(s sample) float64 { return (s.MemMiB["worker"] + s.MemMiB["worker2"]) / 2 }},
		{"control plane anonymous memory (rss), idle", "MiB", "", func(s sample) float64 { return s.AnonMiB["control-plane"] }},
		{"worker anonymous memory (rss), idle (mean of 2)", "MiB", "", func(s sample) float64 { return (s.AnonMiB["worker"] + s.AnonMiB["worker2"]) / 2 }},
		{fmt.Sprintf("Deployment of %d: all Ready", c.replicas), "s", "<= 0.8", func(s sample) float64 { return s.RolloutS }},
		{fmt.Sprintf("Deployment of %d: all gone after delete", c.replicas), "s", "", func(s sample) float64 { return s.DeleteS }},
		{"`kind load docker-image` (100 MB) to 2 workers", "s", "<= 0.8", func(s sample) float64 { return s.KindLoadS }},
		{"pod start p50 at the CRI socket in a worker", "ms", "", func(s sample) float64 { return s.PodStartP50MS }},
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d round(s), medians over the rounds (each round: one fresh 1+2 cluster per image, order alternating); idle %s\n\n", c.rounds, c.idle)
	fmt.Fprintf(&out, "| figure | %s | %s | %s/%s | target | met |\n|---|---|---|---|---|---|\n", a, b, a, b)
	for _, r := range rows {
		var xa, xb []float64
		for _, s := range samples {
			switch s.Image {
			case a:
				xa = append(xa, r.get(s))
			case b:
				xb = append(xb, r.get(s))
			}
		}
		ma, mb := median(xa), median(xb)
		ratio, met := 0.0, ""
		if mb > 0 {
			ratio = ma / mb
		}
		if r.target != "" {
			limit, _ := strconv.ParseFloat(strings.TrimPrefix(r.target, "<= "), 64)
			met = "yes"
			if ratio > limit {
				met = "**no**"
			}
		}
		fmt.Fprintf(&out, "| %s | %s | %s | %.2f | %s | %s |\n", r.name, fmtVals(xa, ma, r.unit), fmtVals(xb, mb, r.unit), ratio, r.target, met)
	}
	return out.String()
}

// fmtVals is the median with its unit, then each round's value.
func fmtVals(xs []float64, m float64, unit string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return fmt.Sprintf("%.1f %s (%s)", m, unit, strings.Join(parts, ", "))
}
