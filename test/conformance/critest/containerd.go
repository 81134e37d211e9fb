package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-runtime/berth/test/runtimeharness"
)

// containerd is the reference runtime (containerd and runc as
// hack/install-containerd builds them) under the same suite as berth: on
// temp roots under work, every registry critest names mirrored to the
// test registry (a certs.d directory), berth's default network rendered
// by berth's own code on the run's bridge and subnet (so the host checks
// are the same), NRI on a socket critest is given, runc's cgroups through
// systemd or cgroupfs as the driver says.
type containerd struct {
	dir, runc, work, cniBinDir, registry string
	cgroupDriver                         string // "systemd" or cgroupfs

	netns map[string]bool // /run/netns before the run
	runtimeharness.Daemon
}

func (c *containerd) root() string      { return filepath.Join(c.work, "containerd") }
func (c *containerd) socket() string    { return filepath.Join(c.root(), "containerd.sock") }
func (c *containerd) endpoint() string  { return "unix://" + c.socket() }
func (c *containerd) nriSocket() string { return filepath.Join(c.work, "nri.sock") }
func (c *containerd) logPath() string   { return filepath.Join(c.work, "containerd.log") }
func (c *containerd) workDir() string   { return c.work }

// cgroupParent: containerd names a pod's cgroups /k8s.io/<id> (its
// namespace) when the pod has no parent, as critest's pods under cgroupfs.
func (c *containerd) cgroupParent() string { return "k8s.io" }

// ids are the ids containerd's debug log names.
func (c *containerd) ids() map[string]bool { return runtimeharness.IDsIn(c.logPath(), "") }

func (c *containerd) config() string {
	r := c.root()
	return runtimeharness.ContainerdConfig{
		Root: filepath.Join(r, "root"), State: filepath.Join(r, "state"), Socket: c.socket(),
		SandboxImage: "registry.k8s.io/pause:3.9", CertsDir: filepath.Join(r, "certs.d"),
		Runc: c.runc, SystemdCgroup: c.cgroupDriver == "systemd", RestrictOOMScoreAdj: !runtimeharness.HasCapSysResource(),
		CNIBinDir: c.cniBinDir, CNIConfDir: filepath.Join(r, "net.d"), NRI: nri(c.work),
		OptDir: filepath.Join(r, "opt"), ShimSocketDir: filepath.Join(c.work, "s"),
	}.TOML()
}

// writeFiles writes the mirrors, the network and the configuration.
func (c *containerd) writeFiles(logs string) (string, error) {
	r := c.root()
	if err := os.MkdirAll(filepath.Join(r, "tmp"), 0o755); err != nil {
		return "", err
	}
	if err := runtimeharness.WriteHostsTOML(filepath.Join(r, "certs.d"), c.registry, mirrored); err != nil {
		return "", err
	}
	if _, err := runtimeharness.WriteDefaultNetwork(filepath.Join(r, "net.d"), bridge, subnet, filepath.Join(r, "ipam")); err != nil {
		return "", err
	}
	cfg := filepath.Join(r, "config.toml")
	return cfg, runtimeharness.WriteConfig(cfg, []byte(c.config()), filepath.Join(logs, "config.toml"))
}

func (c *containerd) start(ctx context.Context, log *slog.Logger, logs string) error {
	bin := filepath.Join(c.dir, "containerd")
	if err := runtimeharness.CheckContainerd(c.dir, c.runc); err != nil {
		return err
	}
	c.netns = runtimeharness.NetnsNames()
	cfg, err := c.writeFiles(logs)
	if err != nil {
		return err
	}
	c.Daemon = runtimeharness.Daemon{
		Name: "containerd", Argv: []string{bin, "--config", cfg, "--log-level", "debug"},
		// The shim is found on PATH, next to containerd; runc is in the config.
		Env:      []string{"PATH=" + c.dir + ":" + os.Getenv("PATH"), "TMPDIR=" + filepath.Join(c.root(), "tmp")},
		Endpoint: c.endpoint(), LogPath: c.logPath(), ReadyIn: 60 * time.Second, OwnGroup: true,
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	log.Info("containerd started", "version", runtimeharness.Version(bin, "--version"), "pid", c.Pid(), "socket", c.socket(), "registry", c.registry)
	return nil
}

// stop removes what failed specs left, then stops containerd: SIGTERM,
// SIGKILL after 20 s. Shims that outlive it name the work dir on their
// command lines: the host check kills and counts them. Pod network
// namespaces left pinned are counted and removed here.
func (c *containerd) stop(log *slog.Logger) int {
	if c.Pid() == 0 {
		return 0
	}
	if dead := c.Stop(log, 20*time.Second, removeLeft(log)); dead > 0 {
		return dead
	}
	return runtimeharness.RemoveNewNetns(log, c.netns)
}
