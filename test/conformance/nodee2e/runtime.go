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
	"time"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/runtimeharness"
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

	runtimeharness.Daemon
}

func (b *berth) name() string          { return "berth" }
func (b *berth) endpoint() string      { return "unix://" + filepath.Join(b.work, "berth.sock") }
func (b *berth) links() []string       { return []string{berthBridge} }
func (b *berth) natPrefixes() []string { return []string{netPrefix} }

// registryHosts are the registries the suite's images name; all are served
// by the test registry (repositories named as upstream's minus the host).
var registryHosts = []string{"docker.io", "registry.k8s.io", "gcr.io", "k8s.gcr.io", "quay.io", "public.ecr.aws"}

func (b *berth) config() (string, error) {
	c := runtimeharness.BerthConfig{
		Socket: filepath.Join(b.work, "berth.sock"), Root: filepath.Join(b.work, "root"), State: filepath.Join(b.work, "state"),
		LogLevel: "debug", RegistryConfigPath: b.certsD,
		CNIConfDir: filepath.Join(b.work, "net.d"), CNIBinDir: b.cniBinDir, DefaultBridge: berthBridge, DefaultSubnet: berthSubnet,
		Registry: b.registry, Mirrored: registryHosts,
	}
	// RuntimeClass and PodOverhead specs run pods with the handler
	// test-handler, which containerd's and CRI-O's e2e configs define; a
	// berth that has runtime handlers gets one with the default settings.
	def, err := exec.Command(b.bin, "config", "default").Output()
	if err != nil {
		return "", fmt.Errorf("%s config default: %w", b.bin, err)
	}
	if strings.Contains(string(def), "[runtimes.") {
		c.RuntimeHandlers = []string{"test-handler"}
	}
	return c.TOML(), nil
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
	if err := runtimeharness.WriteConfig(cfgPath, []byte(cfg), filepath.Join(b.out, "berth-config.toml")); err != nil {
		return err
	}
	b.Daemon = runtimeharness.Daemon{
		Name: "berth", Argv: []string{b.bin, "--config", cfgPath}, Env: []string{"TMPDIR=" + filepath.Join(b.work, "tmp")},
		Endpoint: b.endpoint(), LogPath: filepath.Join(b.out, "berth.log"), ReadyIn: 30 * time.Second, OwnGroup: true,
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	log.Info("berth up", "pid", b.Pid(), "version", runtimeharness.Version(b.bin, "--version"), "endpoint", b.endpoint(), "registry", b.registry)
	return nil
}

func (b *berth) stop(log *slog.Logger) int { return b.Stop(log, 20*time.Second, removeLeft(log)) }

// removeLeft removes every container and pod sandbox left: the kubelet,
// stopped by now, removes the sandboxes of deleted pods only in its
// periodic garbage collection, so some are always left. A removal that
// fails is a leak.
func removeLeft(log *slog.Logger) func(endpoint string) int {
	return func(endpoint string) int {
		found, failed := hostcheck.RemovePods(context.Background(), log, endpoint)
		log.Info("containers and pod sandboxes the kubelet had not collected: removed", "count", found-failed)
		return failed
	}
}
