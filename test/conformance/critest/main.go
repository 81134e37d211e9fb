// Command critestrun runs the CRI validation suite, critest (unmodified),
// against a berth daemon of its own on temp roots, offline, and checks that
// the run left nothing on the host. hack/critest installs and builds what
// it needs, starts the test registry, and runs it:
//
//	critestrun [CRITEST ARGS...]     e.g. critestrun -ginkgo.focus='Image Manager'
//
// The berth it starts has its default network on a bridge and subnet of
// its own (so it never meets a berth of hack/run), registry mirrors sending
// every registry critest names to the test registry, and NRI on a socket
// critest is given. Validation runs on BERTH_CRITEST_NODES ginkgo processes
// (default 4) unless the arguments say -parallel. Exit status: critest's,
// or 1 if critest passed but something leaked; 130/143 on SIGINT/SIGTERM.
// Logs of the last run: $BERTH_OUTPUT/critest/{critest.log,berth.log,config.toml};
// BERTH_CRITEST_VERBOSE=1 streams critest's output too.
// BERTH_CRITEST_CGROUP_DRIVER=systemd runs the runtime with the systemd cgroup
// driver; BERTH_CRITEST_POD_PROCESS=podproc gives berth's pods the C pod
// process. BERTH_CRITEST_RUNTIME=containerd runs the same suite, mirrors,
// bridge, subnet and host checks against containerd (BERTH_CONTAINERD_DIR
// and BERTH_RUNC, as hack/install-containerd builds them) instead of berth.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/test/hostcheck"
	"golang.org/x/sys/unix"
)

// What a run owns on the host, fixed so that leftovers can be told apart.
const (
	bridge   = "berth-critest"
	subnet   = "10.213.0.0/16"
	lockPath = "/run/berth-critest.lock"
)

// ports are the host ports critest binds or maps (webServerHostPortFor*,
// the host-network nginx).
var ports = []int{12000, 12001, 12002, 12003}

// env is what hack/env.sh and hack/registry export.
type env struct {
	berth, critest, ginkgo, cniBinDir, registry, logs string
	runtime, containerdDir, runc, cgroupDriver        string
	nodes                                             int
	verbose                                           bool
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("run", "critest")
	e, err := readEnv()
	if err != nil {
		log.Error("environment (run through hack/critest)", "error", err)
		os.Exit(1)
	}
	os.Exit(run(log, e, os.Args[1:]))
}

func readEnv() (env, error) {
	e := env{
		berth:        os.Getenv("BERTH_BINARY"),
		critest:      os.Getenv("BERTH_CRITEST"),
		ginkgo:       os.Getenv("BERTH_GINKGO"),
		cniBinDir:    os.Getenv("BERTH_CNI_BIN_DIR"),
		registry:     os.Getenv("BERTH_TEST_REGISTRY"),
		logs:         filepath.Join(os.Getenv("BERTH_OUTPUT"), "critest"),
		runtime:      os.Getenv("BERTH_CRITEST_RUNTIME"),
		cgroupDriver: os.Getenv("BERTH_CRITEST_CGROUP_DRIVER"),
		nodes:        4,
		verbose:      os.Getenv("BERTH_CRITEST_VERBOSE") == "1",
	}
	need := map[string]string{"BERTH_CRITEST": e.critest, "BERTH_GINKGO": e.ginkgo, "BERTH_CNI_BIN_DIR": e.cniBinDir, "BERTH_TEST_REGISTRY": e.registry, "BERTH_OUTPUT": os.Getenv("BERTH_OUTPUT")}
	switch e.runtime {
	case "", "berth":
		e.runtime = "berth"
		need["BERTH_BINARY"] = e.berth
	case "containerd":
		e.containerdDir, e.runc = os.Getenv("BERTH_CONTAINERD_DIR"), os.Getenv("BERTH_RUNC")
		need["BERTH_CONTAINERD_DIR"], need["BERTH_RUNC"] = e.containerdDir, e.runc
		e.logs = filepath.Join(os.Getenv("BERTH_OUTPUT"), "critest-containerd")
	default:
		return e, fmt.Errorf("BERTH_CRITEST_RUNTIME=%q: want berth or containerd", e.runtime)
	}
	for name, v := range need {
		if v == "" {
			return e, fmt.Errorf("%s is not set", name)
		}
	}
	if n := os.Getenv("BERTH_CRITEST_NODES"); n != "" {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			return e, fmt.Errorf("BERTH_CRITEST_NODES=%q: want a number of processes", n)
		}
		e.nodes = v
	}
	return e, nil
}

func run(log *slog.Logger, e env, args []string) int {
	if os.Geteuid() != 0 {
		log.Error("berth creates namespaces, mounts and cgroups: run as root")
		return 1
	}
	// One run at a time: the bridge, the subnet and the host ports are fixed.
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		log.Error("another hack/critest is running", "lock", lockPath, "error", err)
		return 1
	}
	defer lock.Close()
	if err := hostcheck.PortsFree(ports...); err != nil {
		log.Error("critest needs its host ports free", "ports", ports, "error", err)
		return 1
	}
	if _, err := net.InterfaceByName(bridge); err == nil {
		log.Warn("the bridge exists (a previous run did not clean up?): deleting it", "bridge", bridge)
		if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
			log.Error("delete the bridge", "bridge", bridge, "error", err, "output", strings.TrimSpace(string(out)))
			return 1
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := newWorkDir()
	if err != nil {
		log.Error("work dir", "error", err)
		return 1
	}
	b := newRuntime(e, w)
	h := snapshotHost(w, b.cgroupParent())
	rc := 1
	if err := os.RemoveAll(e.logs); err == nil {
		err = os.MkdirAll(e.logs, 0o755)
	}
	if err != nil {
		log.Error("log dir", "error", err)
	} else if err := b.start(ctx, log, e.logs); err != nil {
		log.Error("start the runtime", "runtime", e.runtime, "error", err, "log", b.logPath())
	} else {
		rc = runCritest(ctx, log, e, b, args)
	}
	leaks := b.stop(log)
	copyFile(b.logPath(), filepath.Join(e.logs, e.runtime+".log"))
	leaks += h.clean(log, b)
	if leaks > 0 {
		log.Error("leaks found (see above)", "count", leaks)
		if rc == 0 {
			rc = 1
		}
	} else {
		log.Info("clean: no process, mount, cgroup, interface or iptables rule left behind", "runtime", e.runtime)
	}
	if ctx.Err() != nil {
		if rc == 0 {
			rc = 130
		}
		log.Warn("interrupted")
	}
	return rc
}

// newWorkDir makes the run's temp root, searchable by others as /run/berth
// is: a container in a pod's user namespace reaches its rootfs under the
// state dir as nobody to the host.
func newWorkDir() (string, error) {
	w, err := os.MkdirTemp("/tmp", "berth-critest.")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(w, 0o711); err != nil {
		return "", err
	}
	for _, d := range []string{"tmp", "cni"} {
		if err := os.Mkdir(filepath.Join(w, d), 0o755); err != nil {
			return "", err
		}
	}
	return w, nil
}

// runCritest runs the suite on b and prints each skipped spec with its
// reason and ginkgo's summary; it returns critest's exit status.
func runCritest(ctx context.Context, log *slog.Logger, e env, b runtime, args []string) int {
	argv := critestArgs(b, e.nodes, args)
	logPath := filepath.Join(e.logs, "critest.log")
	f, err := os.Create(logPath)
	if err != nil {
		log.Error("critest log", "error", err)
		return 1
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, e.critest, argv...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	// critest -parallel runs the ginkgo CLI from PATH; its temp files (host
	// paths, log dirs, seccomp profiles) go under the run's temp dir.
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(e.ginkgo)+":"+os.Getenv("PATH"), "TMPDIR="+filepath.Join(b.workDir(), "tmp"))
	cmd.Stdout, cmd.Stderr = f, f
	if e.verbose {
		cmd.Stdout = io.MultiWriter(f, os.Stdout)
		cmd.Stderr = cmd.Stdout
	}
	log.Info("running critest", "args", strings.Join(argv[6:], " "))
	start := time.Now()
	err = cmd.Run()
	rc := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		rc = exit.ExitCode()
		if rc < 0 { // killed by a signal
			rc = 1
		}
	case err != nil:
		log.Error("run critest", "error", err)
		rc = 1
	}
	if _, err := f.Seek(0, io.SeekStart); err == nil {
		if out, err := io.ReadAll(f); err == nil {
			fmt.Print(summarize(string(out)))
		}
	}
	log.Info("critest exited", "status", rc, "after", time.Since(start).Round(time.Second), "output", logPath, "runtime_log", filepath.Join(e.logs, e.runtime+".log"))
	return rc
}

// critestArgs are critest's arguments: berth's endpoints and NRI socket,
// every spec's name and outcome in the log (-ginkgo.v, but not with
// -benchmark, which makes ginkgo succinct), nodes processes for the
// validation specs (the results were the same as serial in every run, in
// half the time) unless args say -parallel, then args.
func critestArgs(b runtime, nodes int, args []string) []string {
	argv := []string{"--runtime-endpoint", b.endpoint(), "--image-endpoint", b.endpoint(), "--nri-socket", b.nriSocket(), "-ginkgo.no-color"}
	benchmark, parallel := false, false
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-"):
		case name == "benchmark" && !strings.HasSuffix(a, "=false"):
			benchmark = true
		case name == "parallel":
			parallel = true
		}
	}
	if !benchmark {
		argv = append(argv, "-ginkgo.v")
		if nodes > 1 && !parallel {
			argv = append(argv, "-parallel", strconv.Itoa(nodes))
		}
	}
	return append(argv, args...)
}

func copyFile(from, to string) {
	if b, err := os.ReadFile(from); err == nil {
		_ = os.WriteFile(to, b, 0o644)
	}
}
