package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/runtimeharness"
)

// berth is the daemon under test, on temp roots under work.
type berth struct {
	bin, work, cniBinDir, registry string
	cgroupDriver                   string // empty: berth's default
	podProcess                     string // empty: berth's default

	runtimeharness.Daemon
}

func (b *berth) socket() string    { return filepath.Join(b.work, "berth.sock") }
func (b *berth) endpoint() string  { return "unix://" + b.socket() }
func (b *berth) nriSocket() string { return filepath.Join(b.work, "nri.sock") }
func (b *berth) logPath() string   { return filepath.Join(b.work, "berth.log") }
func (b *berth) stateDir() string  { return filepath.Join(b.work, "state") }
func (b *berth) workDir() string   { return b.work }

// cgroupParent is berth's default, cgroupfs.default_parent.
func (b *berth) cgroupParent() string { return "berth" }

// ids are the pods berth's log names and every object its state dir
// still holds.
func (b *berth) ids() map[string]bool { return runtimeharness.IDsIn(b.logPath(), b.stateDir()) }

// mirrored are the registries critest's hard-coded image names use; the
// test registry holds them all (repositories named as upstream's minus the
// host, test/images/mkimage).
var mirrored = []string{"docker.io", "registry.k8s.io", "k8s.gcr.io", "gcr.io", "public.ecr.aws"}

// nri is the NRI section both runtimes get: a socket of this run's own
// (critest's NRI specs connect their plugins to it) and no pre-installed
// plugins. The specs hold a plugin's Synchronize open for 2 s, NRI's
// default request timeout: a longer one keeps that plugin connected
// (docs/nri.md).
func nri(work string) *runtimeharness.NRI {
	return &runtimeharness.NRI{
		Socket: filepath.Join(work, "nri.sock"), PluginPath: filepath.Join(work, "nri/plugins"),
		PluginConfigPath: filepath.Join(work, "nri/conf.d"), RequestTimeout: "10s",
	}
}

func (b *berth) config() string {
	return runtimeharness.BerthConfig{
		Socket: b.socket(), Root: filepath.Join(b.work, "root"), State: b.stateDir(), LogLevel: "info",
		CgroupDriver: b.cgroupDriver, PodProcess: b.podProcess,
		CNIConfDir: filepath.Join(b.work, "cni"), CNIBinDir: b.cniBinDir, DefaultBridge: bridge, DefaultSubnet: subnet,
		NRI: nri(b.work), Registry: b.registry, Mirrored: mirrored,
	}.TOML()
}

// start writes the config (a copy goes to logs), starts the daemon and
// waits up to 30 s for it to answer on its socket.
func (b *berth) start(ctx context.Context, log *slog.Logger, logs string) error {
	cfg := filepath.Join(b.work, "config.toml")
	if err := runtimeharness.WriteConfig(cfg, []byte(b.config()), filepath.Join(logs, "config.toml")); err != nil {
		return err
	}
	b.Daemon = runtimeharness.Daemon{Name: "berth", Argv: []string{b.bin, "--config", cfg}, Endpoint: b.endpoint(), LogPath: b.logPath(), ReadyIn: 30 * time.Second}
	if err := b.Start(ctx); err != nil {
		return err
	}
	version, _, _ := strings.Cut(runtimeharness.Version(b.bin, "-version"), "\n")
	log.Info("berth started", "version", version, "pid", b.Pid(), "socket", b.socket(), "registry", b.registry)
	return nil
}

// stop removes what the specs left and stops berth (SIGKILL after 15 s).
func (b *berth) stop(log *slog.Logger) int { return b.Stop(log, 15*time.Second, removeLeft(log)) }

// removeLeft removes whatever a failed spec left (containers, then pods).
// That is not a leak by itself: what a removal fails to undo is found by
// the host check afterwards.
func removeLeft(log *slog.Logger) func(endpoint string) int {
	return func(endpoint string) int {
		if found, failed := hostcheck.RemovePods(context.Background(), log, endpoint); found > 0 {
			log.Info("removed what the specs left", "containers_and_pods", found, "failed", failed)
		}
		return 0
	}
}
