package main

import (
	"context"
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

// berth is the daemon under test, on temp roots under work.
type berth struct {
	bin, work, cniBinDir, registry string
	cgroupDriver                   string // empty: berth's default
	podProcess                     string // empty: berth's default

	cmd  *exec.Cmd
	done chan struct{} // closed when the daemon has exited
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
	b.cmd = exec.Command(b.bin, "--config", cfg)
	b.cmd.Stdout, b.cmd.Stderr = out, out
	if err := b.cmd.Start(); err != nil {
		return err
	}
	b.done = make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case <-b.done:
			return fmt.Errorf("berth exited during start-up: %s", b.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if hostcheck.Ping(ctx, b.endpoint()) == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("berth did not answer on %s in 30s", b.socket())
		}
	}
	version, _ := exec.Command(b.bin, "-version").Output()
	first, _, _ := strings.Cut(string(version), "\n")
	log.Info("berth started", "version", first, "pid", b.cmd.Process.Pid, "socket", b.socket(), "registry", b.registry)
	return nil
}

// stop removes whatever a failed spec left (containers, then pods; not a
// leak by itself: what a removal fails to undo is found afterwards) and
// stops the daemon: SIGTERM, SIGKILL after 15 s. It returns 0: leftovers
// are counted by the host check.
func (b *berth) stop(log *slog.Logger) int {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	select {
	case <-b.done:
		log.Error("berth had exited before the end of the run", "state", b.cmd.ProcessState.String())
		return 1
	default:
	}
	if found, failed := hostcheck.RemovePods(context.Background(), log, b.endpoint()); found > 0 {
		log.Info("removed what the specs left", "containers_and_pods", found, "failed", failed)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(15 * time.Second):
		log.Error("berth did not stop in 15s: SIGKILL", "pid", b.cmd.Process.Pid)
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	return 0
}
