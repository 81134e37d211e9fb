package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// berth is the daemon under test, on temp roots under work.
type berth struct {
	bin, work, cniBinDir, registry string
	cgroupDriver                   string // empty: berth's default
	podProcess                     string // empty: berth's default

	process
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
func (b *berth) ids() map[string]bool { return idsIn(b.logPath(), b.stateDir()) }

// mirrored are the registries critest's hard-coded image names use; the
// test registry holds them all (repositories named as upstream's minus the
// host, hack/mkimage).
var mirrored = []string{"docker.io", "registry.k8s.io", "k8s.gcr.io", "gcr.io", "public.ecr.aws"}

func (b *berth) config() string {
	var c strings.Builder
	fmt.Fprintf(&c, "address = %q\nroot = %q\nstate = %q\nlog_level = \"info\"\n", b.socket(), filepath.Join(b.work, "root"), b.stateDir())
	if b.cgroupDriver != "" {
		fmt.Fprintf(&c, "cgroup_driver = %q\n", b.cgroupDriver)
	}
	if b.podProcess != "" {
		fmt.Fprintf(&c, "pod_process = %q\n", b.podProcess)
	}
	c.WriteString("\n")
	fmt.Fprintf(&c, "[cni]\nconf_dir = %q\nbin_dirs = [%q]\ndefault_network = true\ndefault_bridge = %q\ndefault_subnet = %q\n\n", filepath.Join(b.work, "cni"), b.cniBinDir, bridge, subnet)
	// NRI on a socket of this run's own (critest's NRI specs connect their
	// plugins to it) and no pre-installed plugins. The specs hold a
	// plugin's Synchronize open for 2 s, NRI's default request timeout: a
	// longer one keeps that plugin connected (docs/nri.md).
	fmt.Fprintf(&c, "[nri]\nenable = true\nsocket_path = %q\nplugin_path = %q\nplugin_config_path = %q\nplugin_request_timeout = \"10s\"\n\n",
		b.nriSocket(), filepath.Join(b.work, "nri/plugins"), filepath.Join(b.work, "nri/conf.d"))
	for _, h := range mirrored {
		fmt.Fprintf(&c, "[registries.%q]\nmirrors = [%q]\n", h, "http://"+b.registry)
	}
	return c.String()
}

// start writes the config (a copy goes to logs), starts the daemon and
// waits up to 30 s for it to answer on its socket.
func (b *berth) start(ctx context.Context, log *slog.Logger, logs string) error {
	cfg := filepath.Join(b.work, "config.toml")
	if err := os.WriteFile(cfg, []byte(b.config()), 0o644); err != nil {
		return err
	}
	copyFile(cfg, filepath.Join(logs, "config.toml"))
	out, err := os.Create(b.logPath())
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(b.bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = out, out
	b.name = "berth"
	if err := b.startAndWait(ctx, cmd, b.endpoint(), 30*time.Second); err != nil {
		return err
	}
	version, _ := exec.Command(b.bin, "-version").Output()
	first, _, _ := strings.Cut(string(version), "\n")
	log.Info("berth started", "version", first, "pid", b.cmd.Process.Pid, "socket", b.socket(), "registry", b.registry)
	return nil
}

// stop removes what the specs left and stops berth (SIGKILL after 15 s).
func (b *berth) stop(log *slog.Logger) int { return b.process.stop(log, b.endpoint(), 15*time.Second) }
