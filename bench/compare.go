package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const compareUsage = `usage: bench compare [flags]   (hack/bench-compare runs it)

Benchmarks berth beside containerd on this machine, in one run, and prints
one table: each figure for both runtimes and the berth/containerd ratio,
then berth's own primitive steps.

 1. Builds what it needs, each cached (a second run skips the build):
    berth (hack/build), the CNI plugins and the registry (hack/install-tools),
    containerd and runc (hack/install-containerd).
 2. Starts the local registry (hack/registry, which runs this command again
    under it) and, for each CNI chain (bridge + host-local, then bridge +
    host-local + portmap, one conf dir each, used by both runtimes), starts
    berth and containerd side by side on temp roots and sockets, each with
    a registry mirror for docker.io and registry.k8s.io to the local
    registry (containerd: hosts.toml; sandbox image registry.k8s.io/pause:3.9,
    the test bed's pause image), runs bench timings (berth's primitive
    steps) and the benchmark against both endpoints, alternating sample by
    sample.
 3. Writes -out/{plain,portmap}.json, steps-*.json (berth's primitive steps,
    timed before and after the benchmark), the daemons' logs and table.md,
    and prints the table. berth's log gives the time of its own steps inside
    RunPodSandbox and StopPodSandbox (rows "· ·").

Everything it started is stopped, and what it created (temp dirs, mounts
under them, its bridge, its cgroups, leftover processes of its daemons,
iptables rules of its network) is removed, on any exit; each thing left
that a runtime should have removed is logged as a LEAK.

Each flag's default is the environment variable named in its help.
Needs root.`

// compareOptions are the knobs of a comparison run.
type compareOptions struct {
	n, c, execs, pulls, timingsN int
	list                         string
	chains                       []string
	out                          string
	pullOnly                     bool
	huge                         int64
	berth, cniBin                string
}

// chain is one CNI configuration both runtimes are measured on.
type chain struct {
	name, label, phases, targets string
	portmap                      bool
}

var chains = []chain{
	{name: "plain", label: "bridge + host-local", phases: "pull,start,exec,concurrent,scale", targets: "plain"},
	{name: "portmap", label: "bridge + host-local + portmap", phases: "pull,start,exec,concurrent", targets: "portmap", portmap: true},
}

func findChain(name string) (chain, error) {
	for _, c := range chains {
		if c.name == name {
			return c, nil
		}
	}
	return chain{}, fmt.Errorf("unknown chain %q (plain, portmap)", name)
}

// envOr is the environment variable's value, def when unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int64) int64 {
	v, err := strconv.ParseInt(os.Getenv(name), 10, 64)
	if err != nil {
		return def
	}
	return v
}

func parseCompareFlags(args []string) (*compareOptions, error) {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), compareUsage); fs.PrintDefaults() }
	o := &compareOptions{}
	output := envOr("BERTH_OUTPUT", "_output")
	fs.IntVar(&o.n, "n", int(envInt("BENCH_N", 20)), "sequential pods ($BENCH_N)")
	fs.IntVar(&o.c, "c", int(envInt("BENCH_C", 10)), "pods at once ($BENCH_C)")
	fs.StringVar(&o.list, "list", envOr("BENCH_LIST", "100,250"), "pod counts for List and memory ($BENCH_LIST)")
	fs.IntVar(&o.execs, "execs", int(envInt("BENCH_EXECS", 50)), "ExecSync calls per runtime ($BENCH_EXECS)")
	fs.IntVar(&o.pulls, "pulls", int(envInt("BENCH_PULLS", 3)), "pulls per runtime and chain ($BENCH_PULLS)")
	fs.IntVar(&o.timingsN, "timings-n", int(envInt("BENCH_TIMINGS_N", 20)), "iterations of berth's primitive steps, half before and half after the benchmark ($BENCH_TIMINGS_N)")
	chainList := fs.String("chains", envOr("BENCH_CHAINS", "plain portmap"), "CNI chains, space- or comma-separated: plain, portmap ($BENCH_CHAINS)")
	fs.StringVar(&o.out, "out", envOr("BENCH_OUT", filepath.Join(output, "bench")), "where the reports, logs and table go ($BENCH_OUT, default $BERTH_OUTPUT/bench)")
	fs.BoolVar(&o.pullOnly, "pull-only", os.Getenv("BENCH_PULL_ONLY") != "", "only the pull figures, on the plain chain: the ~100 MB five-layer image, then a one-layer image of -huge bytes ($BENCH_PULL_ONLY non-empty)")
	fs.Int64Var(&o.huge, "huge", envInt("BENCH_HUGE", 1<<30), "size of the one-layer image of -pull-only ($BENCH_HUGE)")
	fs.StringVar(&o.berth, "berth", envOr("BERTH_BINARY", filepath.Join(output, "bin", "berth")), "the berth binary ($BERTH_BINARY)")
	fs.StringVar(&o.cniBin, "cni-bin-dir", os.Getenv("BERTH_CNI_BIN_DIR"), "the CNI plugins ($BERTH_CNI_BIN_DIR)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.chains = strings.Fields(strings.ReplaceAll(*chainList, ",", " "))
	if o.pullOnly {
		o.chains = []string{"plain"}
	}
	for _, name := range o.chains {
		if _, err := findChain(name); err != nil {
			return nil, err
		}
	}
	if o.cniBin == "" {
		return nil, errors.New("-cni-bin-dir (or $BERTH_CNI_BIN_DIR, which hack/env.sh sets) is required")
	}
	return o, nil
}

// compareCommand builds what is missing, then runs itself again under
// hack/registry, which sets BERTH_TEST_REGISTRY; that run measures.
func compareCommand(args []string) error {
	o, err := parseCompareFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("compare: needs root")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("cmd", "bench-compare")
	reg := os.Getenv("BERTH_TEST_REGISTRY")
	if reg == "" {
		if err := buildAll(log); err != nil {
			return fmt.Errorf("compare: %w", err)
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		if os.Getenv("BENCH_COMPARE_START") == "" {
			os.Setenv("BENCH_COMPARE_START", strconv.FormatInt(time.Now().Unix(), 10))
		}
		argv := append([]string{"hack/registry", "--", self, "compare"}, args...)
		return syscall.Exec("hack/registry", argv, os.Environ())
	}
	ctrd, err := locateContainerd(log)
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	return runCompare(log, o, ctrd, reg)
}

// buildAll runs the build scripts, each of which skips what is built.
func buildAll(log *slog.Logger) error {
	start := time.Now()
	for _, argv := range [][]string{{"hack/install-deps"}, {"hack/install-tools", "cni", "registry"}, {"hack/build"}} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stderr = os.Stderr
		if argv[0] != "hack/install-deps" {
			cmd.Stdout = os.Stdout
		}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
	}
	log.Info("berth and tools ready", "in", time.Since(start).Round(time.Second))
	return nil
}

// containerdInstall is the reference stack hack/install-containerd built.
type containerdInstall struct {
	dir, runc          string
	version, runcVersn string // "v2.4.2", from the cache directories' names
}

// locateContainerd runs hack/install-containerd (it builds what is not
// cached) and reads the two directories it prints.
func locateContainerd(log *slog.Logger) (containerdInstall, error) {
	start := time.Now()
	cmd := exec.Command("hack/install-containerd")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return containerdInstall{}, fmt.Errorf("hack/install-containerd: %w", err)
	}
	dirs := strings.Fields(string(out))
	if len(dirs) != 2 {
		return containerdInstall{}, fmt.Errorf("hack/install-containerd printed %q, want two directories", out)
	}
	c := containerdInstall{
		dir: dirs[0], runc: filepath.Join(dirs[1], "runc"),
		version:   strings.TrimPrefix(filepath.Base(dirs[0]), "containerd-"),
		runcVersn: strings.TrimPrefix(filepath.Base(dirs[1]), "runc-"),
	}
	log.Info("containerd and runc ready", "containerd", c.version, "runc", c.runcVersn, "in", time.Since(start).Round(time.Second))
	return c, nil
}

// runCompare measures every chain and prints the table. The host is
// restored whatever happens, a signal included.
func runCompare(log *slog.Logger, o *compareOptions, ctrd containerdInstall, reg string) (err error) {
	ctx, stop := signalContext()
	defer stop()
	h, err := newCompareHost(log)
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	defer func() {
		h.restore()
		if cause := context.Cause(ctx); cause != nil {
			err = cause // the signal: the exit status says which
		}
	}()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if err := h.prepare(o.cniBin); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	r := &compareRun{o: o, h: h, ctrd: ctrd, reg: reg, log: log}
	for _, name := range o.chains {
		c, _ := findChain(name)
		if err := r.chain(ctx, c); err != nil {
			return fmt.Errorf("compare: %s: %w", c.label, err)
		}
	}
	return r.table()
}

// compareRun is one run's state across its chains.
type compareRun struct {
	o       *compareOptions
	h       *compareHost
	ctrd    containerdInstall
	reg     string
	log     *slog.Logger
	reports []string
	steps   []string
}

// chain starts both daemons on c, measures, stops them and keeps their logs.
func (r *compareRun) chain(ctx context.Context, c chain) error {
	start := time.Now()
	berth, ctrd, err := r.h.startDaemons(ctx, c, r.o, r.ctrd, r.reg)
	if err != nil {
		return err
	}
	r.log.Info("daemons up", "chain", c.label, "berth", berth.Pid(), "containerd", ctrd.Pid())
	base := []string{
		"-endpoint", "berth=" + berth.Endpoint, "-endpoint", "containerd=" + ctrd.Endpoint,
		"-pid", fmt.Sprintf("berth=%d,containerd=%d", berth.Pid(), ctrd.Pid()), "-log", "berth=" + berth.LogPath,
		"-image", "docker.io/library/busybox:latest", "-pull-samples", strconv.Itoa(r.o.pulls),
	}
	if r.o.pullOnly {
		err = r.pulls(ctx, c, base)
	} else {
		err = r.bench(ctx, c, base)
	}
	r.h.stopDaemons()
	for _, p := range []string{berth.LogPath, ctrd.LogPath} {
		if cerr := copyFile(p, filepath.Join(r.o.out, filepath.Base(p))); cerr != nil {
			r.log.Warn("keep the daemon's log", "error", cerr)
		}
	}
	if err == nil && !r.o.pullOnly {
		r.log.Info("done", "chain", c.label, "in", time.Since(start).Round(time.Second))
	}
	return err
}

// bench runs half the timings, the benchmark, then the other half, so that
// on average the timings see the load the benchmark saw.
func (r *compareRun) bench(ctx context.Context, c chain, base []string) error {
	if err := r.timings(ctx, c, "pre"); err != nil {
		return err
	}
	report := filepath.Join(r.o.out, c.name+".json")
	args := slices.Concat(base, []string{"-pull-image", "docker.io/berth-test/big:latest",
		"-n", strconv.Itoa(r.o.n), "-c", strconv.Itoa(r.o.c), "-execs", strconv.Itoa(r.o.execs), "-list", r.o.list,
		"-phases", c.phases, "-cgroup-root", r.h.cgroupRoot, "-label", c.label, "-targets", c.targets, "-json", report})
	if err := runSelf(ctx, io.Discard, args...); err != nil {
		return err
	}
	if err := r.timings(ctx, c, "post"); err != nil {
		return err
	}
	r.reports = append(r.reports, report)
	return nil
}

func (r *compareRun) timings(ctx context.Context, c chain, when string) error {
	out := filepath.Join(r.o.out, "steps-"+c.name+"-"+when+".json")
	err := runSelf(ctx, os.Stderr, "timings", "-berth", r.o.berth, "--config", r.h.berthConfig(c),
		"-n", strconv.Itoa((r.o.timingsN+1)/2), "-label", c.label, "-json", out)
	if err == nil {
		r.steps = append(r.steps, out)
	}
	return err
}

// pulls times the pulls only: the five-layer image, then a one-layer one
// of -huge bytes pushed for it.
func (r *compareRun) pulls(ctx context.Context, c chain, base []string) error {
	for _, img := range []string{"big", "huge"} {
		targets := c.targets
		if img == "huge" {
			targets = "pull-huge"
			if err := runSelf(ctx, os.Stderr, "push-layer", "-size", strconv.FormatInt(r.o.huge, 10), "-ref", r.reg+"/berth-test/huge:latest"); err != nil {
				return err
			}
		}
		report := filepath.Join(r.o.out, "pull-"+img+".json")
		args := slices.Concat(base, []string{"-pull-image", "docker.io/berth-test/" + img + ":latest", "-phases", "pull",
			"-label", "pull of berth-test/" + img, "-targets", targets, "-json", report})
		if err := runSelf(ctx, io.Discard, args...); err != nil {
			return err
		}
		r.reports = append(r.reports, report)
	}
	return nil
}

// table writes table.md and prints it.
func (r *compareRun) table() error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "berth %s vs containerd %s (runc %s), %d CPUs, kernel %s, %s\n\n",
		berthVersion(), r.ctrd.version, r.ctrd.runcVersn, runtime.NumCPU(), kernelRelease(), time.Now().UTC().Format("2006-01-02T15:04Z"))
	if err := writeTable(&b, r.reports, r.steps); err != nil {
		return err
	}
	os.Stdout.Write(b.Bytes())
	if err := os.WriteFile(filepath.Join(r.o.out, "table.md"), b.Bytes(), 0o644); err != nil {
		return err
	}
	total := "?"
	if s, err := strconv.ParseInt(os.Getenv("BENCH_COMPARE_START"), 10, 64); err == nil {
		total = time.Since(time.Unix(s, 0)).Round(time.Second).String()
	}
	r.log.Info("finished", "total (builds included)", total, "results", r.o.out)
	return nil
}

// runSelf runs this program with args, its stdout to stdout and its stderr
// to ours; a cancelled ctx sends it SIGTERM, on which it tears down.
func runSelf(ctx context.Context, stdout io.Writer, args ...string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Minute
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bench %s: %w", args[0], err)
	}
	return nil
}

func berthVersion() string {
	out, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return "dev"
	}
	return strings.TrimSpace(string(out))
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "?"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}
