package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-runtime/berth/test/runtimeharness"
)

// containerd is containerd (v2.4.2 and runc as hack/install-containerd
// builds them) on temp roots under work, configured as the berth above is
// for the side-by-side run: pulls through the same certs.d directory
// (config_path), berth's default network rendered by berth's own code on the
// same bridge and subnet (so links() and natPrefixes() are the same), the
// runtime handlers runc and test-handler, cgroupfs. containerd's CRI pins
// pod network namespaces under /run/netns (not under work): those it
// leaves are leaks.
type containerd struct {
	dir, runc, cniBinDir, certsD, work, out string

	root  string
	netns map[string]bool // /run/netns before the run
	runtimeharness.Daemon
}

func (c *containerd) name() string          { return "containerd" }
func (c *containerd) endpoint() string      { return "unix://" + filepath.Join(c.root, "containerd.sock") }
func (c *containerd) links() []string       { return []string{berthBridge} }
func (c *containerd) natPrefixes() []string { return []string{netPrefix} }

func (c *containerd) config() string {
	r := c.root
	return runtimeharness.ContainerdConfig{
		Root: filepath.Join(r, "root"), State: filepath.Join(r, "state"), Socket: filepath.Join(r, "containerd.sock"),
		SandboxImage: "registry.k8s.io/pause:3.10.2", CertsDir: c.certsD, Runc: c.runc,
		// The RuntimeClass and PodOverhead specs' handler, as containerd's
		// own node e2e configuration has it.
		RuntimeHandlers: []string{"test-handler"},
		// root here lacks CAP_SYS_RESOURCE: clamp oom_score_adj instead of failing
		RestrictOOMScoreAdj: true,
		CNIBinDir:           c.cniBinDir, CNIConfDir: filepath.Join(r, "net.d"), OptDir: filepath.Join(r, "opt"),
		ShimSocketDir: c.shimSocketDir(), ImageVerifierDir: filepath.Join(r, "image-verifier"),
	}.TOML()
}

// shimSocketDir is right under work: containerd refuses a shim socket_dir
// longer than 42 bytes (the sockets' unix path limit), and under root it
// was 43 whenever MkdirTemp's random part had 10 digits, leaving containerd
// without its CRI.
func (c *containerd) shimSocketDir() string { return filepath.Join(c.work, "s") }

func (c *containerd) start(ctx context.Context, log *slog.Logger) error {
	if c.certsD == "" {
		return errors.New("no registry config path: set BERTH_TEST_E2E_CERTS_D or --registry-config-path (hack/node-e2e starts hack/registry --e2e)")
	}
	bin := filepath.Join(c.dir, "containerd")
	if err := runtimeharness.CheckContainerd(c.dir, c.runc); err != nil {
		return err
	}
	c.root = filepath.Join(c.work, "containerd")
	if err := os.MkdirAll(filepath.Join(c.root, "tmp"), 0o755); err != nil {
		return err
	}
	c.netns = runtimeharness.NetnsNames()
	conflist, err := runtimeharness.WriteDefaultNetwork(filepath.Join(c.root, "net.d"), berthBridge, berthSubnet, filepath.Join(c.root, "ipam"))
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(c.root, "config.toml")
	if err := runtimeharness.WriteConfig(cfgPath, []byte(c.config()), filepath.Join(c.out, "containerd-config.toml")); err != nil {
		return err
	}
	_ = os.WriteFile(filepath.Join(c.out, "cni.conflist"), conflist, 0o644)
	c.Daemon = runtimeharness.Daemon{
		Name: "containerd", Argv: []string{bin, "--config", cfgPath, "--log-level", "debug"},
		// The shim is found on PATH (next to containerd); runc is in the config.
		Env:      []string{"PATH=" + c.dir + ":" + os.Getenv("PATH"), "TMPDIR=" + filepath.Join(c.root, "tmp")},
		Endpoint: c.endpoint(), LogPath: filepath.Join(c.out, "containerd.log"), ReadyIn: 60 * time.Second, OwnGroup: true,
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	log.Info("containerd up", "pid", c.Pid(), "version", runtimeharness.Version(bin, "--version"), "endpoint", c.endpoint(), "registry-config-path", c.certsD)
	return nil
}

// stop removes what pods are left and stops containerd. Shims of pods not
// removed outlive it (their command lines name the work dir: the host
// restore kills and counts them); the pod network namespaces it left
// pinned are counted and removed here.
func (c *containerd) stop(log *slog.Logger) int {
	if c.Pid() == 0 {
		return 0
	}
	return c.Stop(log, 20*time.Second, removeLeft(log)) + runtimeharness.RemoveNewNetns(log, c.netns)
}
