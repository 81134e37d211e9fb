package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/test/hostcheck"
)

// runtime is the CRI runtime the suite's kubelet talks to.
type runtime interface {
	name() string
	start(ctx context.Context, log *slog.Logger) error
	endpoint() string
	// links and natPrefixes name the host state of its pod network, which
	// the host restore removes (counted as leaks if pods were left).
	links() []string
	natPrefixes() []string
	// stop removes what pods are left (each counted as a leak), stops the
	// runtime and returns the leak count.
	stop(log *slog.Logger) int
}

// external is a runtime already running at a CRI endpoint given by the
// user: nothing is started or stopped.
type external struct{ ep string }

func (e *external) name() string                                    { return "runtime at " + e.ep }
func (e *external) start(ctx context.Context, _ *slog.Logger) error { return hostcheck.Ping(ctx, e.ep) }
func (e *external) endpoint() string                                { return e.ep }
func (e *external) links() []string                                 { return nil }
func (e *external) natPrefixes() []string                           { return nil }
func (e *external) stop(*slog.Logger) int                           { return 0 }

// The pod network of the berth this program starts: a bridge and subnet of
// its own, so it never meets a berth of hack/run, hack/critest or a test.
const (
	berthBridge = "berth-e2e"
	berthSubnet = "10.219.0.0/20"
)

// berth is a berth daemon on temp roots under work.
type berth struct {
	bin, cniBinDir, registry, work, out string
	// certsD is a registry_config_path directory (hack/registry --e2e
	// writes one sending every registry's pulls to the test registry).
	certsD string

	cmd  *exec.Cmd
	done chan struct{}
}

func (b *berth) name() string          { return "berth" }
func (b *berth) endpoint() string      { return "unix://" + filepath.Join(b.work, "berth.sock") }
func (b *berth) links() []string       { return []string{berthBridge} }
func (b *berth) natPrefixes() []string { return []string{netPrefix} }

// registryHosts are the registries the suite's images name; all are served
// by the test registry (repositories named as upstream's minus the host).
var registryHosts = []string{"docker.io", "registry.k8s.io", "gcr.io", "k8s.gcr.io", "quay.io", "public.ecr.aws"}

func (b *berth) config() (string, error) {
	var c strings.Builder
	fmt.Fprintf(&c, "address = %q\nroot = %q\nstate = %q\nlog_level = \"debug\"\n", filepath.Join(b.work, "berth.sock"), filepath.Join(b.work, "root"), filepath.Join(b.work, "state"))
	if b.certsD != "" {
		fmt.Fprintf(&c, "registry_config_path = %q\n", b.certsD)
	}
	c.WriteString("\n")
	fmt.Fprintf(&c, "[cni]\nconf_dir = %q\nbin_dirs = [%q]\ndefault_network = true\ndefault_bridge = %q\ndefault_subnet = %q\n\n", filepath.Join(b.work, "net.d"), b.cniBinDir, berthBridge, berthSubnet)
	for _, h := range registryHosts {
		fmt.Fprintf(&c, "[registries.%q]\nmirrors = [\"http://%s\"]\n", h, b.registry)
	}
	// RuntimeClass and PodOverhead specs run pods with the handler
	// test-handler, which containerd's and CRI-O's e2e configs define; a
	// berth that has runtime handlers gets one with the default settings.
	def, err := exec.Command(b.bin, "config", "default").Output()
	if err != nil {
		return "", fmt.Errorf("%s config default: %w", b.bin, err)
	}
	if strings.Contains(string(def), "[runtimes.") {
		c.WriteString("\n[runtimes.test-handler]\n")
	}
	return c.String(), nil
}

func (b *berth) start(ctx context.Context, log *slog.Logger) error {
	if b.registry == "" {
		return errors.New("no test registry: set BERTH_TEST_REGISTRY or --registry (hack/node-e2e starts one with hack/registry)")
	}
	if _, err := os.Stat(b.bin); err != nil {
		return fmt.Errorf("berth binary: %w (hack/build)", err)
	}
	for _, d := range []string{"net.d", "tmp"} {
		if err := os.MkdirAll(filepath.Join(b.work, d), 0o755); err != nil {
			return err
		}
	}
	cfg, err := b.config()
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(b.work, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	os.WriteFile(filepath.Join(b.out, "berth-config.toml"), []byte(cfg), 0o644)
	logf, err := os.Create(filepath.Join(b.out, "berth.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	b.cmd = exec.Command(b.bin, "--config", cfgPath)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	b.cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(b.work, "tmp"))
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		return err
	}
	b.done = make(chan struct{})
	go func() { b.cmd.Wait(); close(b.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-b.done:
			return fmt.Errorf("berth exited during start-up (%v); its log: %s", b.cmd.ProcessState, filepath.Join(b.out, "berth.log"))
		default:
		}
		if err := hostcheck.Ping(ctx, b.endpoint()); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("berth not answering on %s after 30s: %w", b.endpoint(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	v, _ := exec.Command(b.bin, "--version").Output()
	log.Info("berth up", "pid", b.cmd.Process.Pid, "version", strings.TrimSpace(string(v)), "endpoint", b.endpoint(), "registry", b.registry)
	return nil
}

func (b *berth) stop(log *slog.Logger) int {
	if b.cmd == nil || b.done == nil {
		return 0
	}
	leaks := 0
	select {
	case <-b.done:
		log.Error("berth died during the run", "state", b.cmd.ProcessState.String())
		return 1
	default:
	}
	leaks += removeLeft(log, b.endpoint())
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		log.Error("berth did not stop in 20s: SIGKILL")
		b.cmd.Process.Kill()
		<-b.done
	}
	return leaks
}

// removeLeft removes every container and pod sandbox left: the kubelet,
// stopped by now, removes the sandboxes of deleted pods only in its
// periodic garbage collection, so some are always left. A removal that
// fails is a leak.
func removeLeft(log *slog.Logger, endpoint string) int {
	found, failed := hostcheck.RemovePods(context.Background(), log, endpoint)
	log.Info("containers and pod sandboxes the kubelet had not collected: removed", "count", found-failed)
	return failed
}
