// Command nodee2e runs Kubernetes' node conformance suite (test/e2e_node,
// the binary e2e_node.test, unmodified) in its services mode against a CRI
// runtime: a berth it starts on temp roots, or any CRI endpoint given. The
// suite starts an API server and etcd inside itself and the kubelet found
// next to the test binary; this program gives it a runtime, a node IP that
// is not loopback, a kubelet configuration this host accepts and a PATH
// without systemd-run, runs it through the ginkgo CLI, prints
// "N passed, N failed, N skipped" from ginkgo's JSON report, and leaves the
// host as it found it. hack/node-e2e builds what it needs and runs it.
package main

import (
	"github.com/berth-runtime/berth/test/kubehost"

	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The default selection, as upstream's node e2e jobs have it, plus
// Disruptive (those restart the kubelet or the runtime).
const (
	defaultFocus = `\[NodeConformance\]`
	defaultSkip  = `\[Flaky\]|\[Slow\]|\[Serial\]|\[Disruptive\]`
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, " ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

type options struct {
	runtime   string
	endpoint  string
	focus     multi
	skip      multi
	noDefault bool
	skipFile  string
	nodes     int
	binDir    string
	out       string
	registry  string
	certsD    string
	berth     string
	cniBinDir string
	ctrdDir   string
	runc      string
	timeout   time.Duration
	gates     string
	verbose   bool
	dryRun    bool
	testArgs  []string
}

func main() {
	var o options
	root := os.Getenv("BERTH_ROOT_DIR")
	flag.StringVar(&o.runtime, "runtime", "berth", "runtime to start: berth, or containerd (the reference, on the same registry and network)")
	flag.StringVar(&o.endpoint, "endpoint", "", "CRI endpoint (unix:///path) of a runtime already running: start none")
	flag.Var(&o.focus, "focus", "ginkgo --focus regex (repeatable; default "+defaultFocus+")")
	flag.Var(&o.skip, "skip", "ginkgo --skip regex (repeatable; added to the default skip and the skip list)")
	flag.BoolVar(&o.noDefault, "no-default-skip", false, "do not add the default skip ("+defaultSkip+")")
	flag.StringVar(&o.skipFile, "skip-file", filepath.Join(root, "test/conformance/nodee2e/skip.txt"), "checked-in skip list (empty: none)")
	flag.IntVar(&o.nodes, "nodes", 2, "ginkgo processes")
	flag.StringVar(&o.binDir, "bin-dir", os.Getenv("BERTH_KUBELET_DIR"), "directory holding e2e_node.test, kubelet and ginkgo")
	flag.StringVar(&o.out, "out", filepath.Join(os.Getenv("BERTH_OUTPUT"), "node-e2e"), "report directory (emptied first)")
	flag.StringVar(&o.registry, "registry", os.Getenv("BERTH_TEST_REGISTRY"), "host:port of the registry serving the test images (mirror of docker.io, registry.k8s.io ...)")
	flag.StringVar(&o.certsD, "registry-config-path", os.Getenv("BERTH_TEST_E2E_CERTS_D"), "berth's registry_config_path (hosts.toml dirs; hack/registry --e2e writes one)")
	flag.StringVar(&o.berth, "berth", os.Getenv("BERTH_BINARY"), "berth binary")
	flag.StringVar(&o.cniBinDir, "cni-bin-dir", os.Getenv("BERTH_CNI_BIN_DIR"), "CNI plugin directory for berth")
	flag.StringVar(&o.ctrdDir, "containerd-dir", os.Getenv("BERTH_CONTAINERD_DIR"), "directory of containerd and containerd-shim-runc-v2 (--runtime containerd; hack/install-containerd)")
	flag.StringVar(&o.runc, "runc", os.Getenv("BERTH_RUNC"), "runc binary (--runtime containerd; hack/install-containerd)")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Hour, "ginkgo suite timeout")
	flag.StringVar(&o.gates, "feature-gates", "", "kubelet feature gates for the suite's kubelet config (A=true,B=false), the same for every runtime")
	flag.BoolVar(&o.verbose, "v", false, "stream the suite's output to the terminal (always in OUT/ginkgo.log)")
	flag.BoolVar(&o.dryRun, "dry-run", false, "list the selected specs without running them (no runtime, no kubelet)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: hack/node-e2e [flags] [-- e2e_node.test flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	o.testArgs = flag.Args()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc, err := run(ctx, log, o)
	if err != nil {
		log.Error("node-e2e", "error", err)
		if rc == 0 {
			rc = 1
		}
	}
	os.Exit(rc)
}

// run returns the exit status: 0 when every selected spec passed and the
// host was left clean.
func run(ctx context.Context, log *slog.Logger, o options) (rc int, err error) {
	if os.Geteuid() != 0 {
		return 1, errors.New("the kubelet and berth need root")
	}
	if _, err := parseGates(o.gates); err != nil {
		return 2, err
	}
	for _, b := range []string{"e2e_node.test", "kubelet", "ginkgo"} {
		if _, err := os.Stat(filepath.Join(o.binDir, b)); err != nil {
			return 1, fmt.Errorf("%s not in --bin-dir %s (hack/kubelet e2e_node.test kubelet ginkgo builds them): %w", b, o.binDir, err)
		}
	}
	if abs, err := filepath.Abs(o.binDir); err == nil {
		o.binDir = abs
	}
	skips, err := readSkipList(o.skipFile)
	if err != nil {
		return 1, err
	}
	if err := os.RemoveAll(o.out); err != nil {
		return 1, err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 1, err
	}
	if o.dryRun {
		res, err := runSuite(ctx, log, o, skips, nil)
		if err != nil {
			return 1, err
		}
		for _, s := range res.PassedNames {
			fmt.Println(s)
		}
		fmt.Printf("%d specs selected\n", len(res.PassedNames))
		return 0, nil
	}

	unlock, err := kubehost.Lock(ctx, func() { log.Info("another kubelet run holds the lock: waiting", "lock", kubehost.LockPath) })
	if err != nil {
		return 1, err
	}
	defer unlock()
	if err := checkPorts(); err != nil {
		return 1, err
	}

	work, err := os.MkdirTemp("", "berth-node-e2e.")
	if err != nil {
		return 1, err
	}
	// Searchable by others, as /run/berth is: a container in a user
	// namespace reaches its rootfs under the state dir as nobody.
	os.Chmod(work, 0o711)

	host, err := snapshotHost()
	if err != nil {
		return 1, err
	}
	leaks := 0
	defer func() {
		leaks += host.restore(log, work, filepath.Join(work, "suite", "kubelet"))
		if leaks > 0 {
			log.Error("the run left things behind (removed; see above)", "leaks", leaks)
			if rc == 0 {
				rc = 1
			}
		} else {
			log.Info("clean: nothing of the run left on the host")
		}
	}()

	nodeIP, err := makeNodeIP(log)
	if err != nil {
		return 1, err
	}
	host.links = append(host.links, nodeLink)

	var rt runtime
	switch {
	case o.endpoint != "":
		rt = &external{ep: o.endpoint}
	case o.runtime == "berth":
		rt = &berth{bin: o.berth, cniBinDir: o.cniBinDir, registry: o.registry, certsD: o.certsD, work: work, out: o.out}
	case o.runtime == "containerd":
		rt = &containerd{dir: o.ctrdDir, runc: o.runc, cniBinDir: o.cniBinDir, certsD: o.certsD, work: work, out: o.out}
	default:
		return 1, fmt.Errorf("--runtime %q: berth or containerd", o.runtime)
	}
	if err := rt.start(ctx, log); err != nil {
		rt.stop(log)
		return 1, fmt.Errorf("start %s: %w", rt.name(), err)
	}
	host.links = append(host.links, rt.links()...)
	host.natPrefixes = append(host.natPrefixes, rt.natPrefixes()...)
	defer func() { leaks += rt.stop(log) }()
	// Before the runtime stops (defers run last first): the suite leaves its
	// kubelet and services up (--stop-services=false) for this.
	defer stopServices(ctx, log, rt.endpoint(), work)

	start := time.Now()
	res, err := runSuite(ctx, log, o, skips, &suiteEnv{work: work, endpoint: rt.endpoint(), nodeIP: nodeIP, runtimePid: runtimePid(rt)})
	if err != nil {
		return 1, err
	}
	res.print(os.Stdout, time.Since(start))
	if res.Failed > 0 || res.exitErr != nil && res.Passed == 0 {
		return 1, nil
	}
	return 0, nil
}

// runtimePid is the pid of the runtime this program started, 0 for one
// given by its endpoint.
func runtimePid(rt runtime) int {
	if d, ok := rt.(interface{ Pid() int }); ok {
		return d.Pid()
	}
	return 0
}
