package runtimeharness

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/network"
)

// ContainerdConfig is a containerd (v2, config version 3) on a run's temp
// roots with its CRI plugin, runc as the runtime; TOML renders it.
type ContainerdConfig struct {
	Root, State string
	Socket      string // the gRPC socket; ttrpc's is beside it
	// SandboxImage is the pinned pause image.
	SandboxImage string
	// CertsDir is the registry config_path (a hosts.toml a registry,
	// WriteHostsTOML).
	CertsDir string
	Runc     string
	// SystemdCgroup has runc manage cgroups through systemd.
	SystemdCgroup bool
	// RuntimeHandlers are handlers set as runc is, besides runc itself
	// (the e2e suites' "test-handler").
	RuntimeHandlers []string
	// RestrictOOMScoreAdj clamps the oom_score_adj containerd is given
	// where it may not lower it (no CAP_SYS_RESOURCE: HasCapSysResource).
	RestrictOOMScoreAdj bool
	// NetnsUnderState pins pod network namespaces under State rather than
	// /run/netns.
	NetnsUnderState       bool
	CNIBinDir, CNIConfDir string
	OptDir                string
	NRI                   *NRI // nil: NRI off
	// ShimSocketDir must be short: containerd refuses one over 42 bytes
	// (the shim sockets' unix path limit).
	ShimSocketDir string
	// ImageVerifierDir is the image verifier plugin's bin_dir; "":
	// containerd's default.
	ImageVerifierDir string
}

// TOML renders the configuration.
func (c ContainerdConfig) TOML() string {
	const images, rt = "plugins.'io.containerd.cri.v1.images'", "plugins.'io.containerd.cri.v1.runtime'"
	var b strings.Builder
	fmt.Fprintf(&b, "version = 3\nroot = %q\nstate = %q\n\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n\n", c.Root, c.State, c.Socket, c.Socket+".ttrpc")
	fmt.Fprintf(&b, "[%s]\n  snapshotter = 'overlayfs'\n  [%[1]s.pinned_images]\n    sandbox = %[2]q\n  [%[1]s.registry]\n    config_path = %[3]q\n\n", images, c.SandboxImage, c.CertsDir)
	fmt.Fprintf(&b, "[%s]\n  restrict_oom_score_adj = %t\n", rt, c.RestrictOOMScoreAdj)
	if c.NetnsUnderState {
		b.WriteString("  netns_mounts_under_state_dir = true\n")
	}
	fmt.Fprintf(&b, "  [%s.containerd]\n    default_runtime_name = 'runc'\n", rt)
	for _, h := range append([]string{"runc"}, c.RuntimeHandlers...) {
		fmt.Fprintf(&b, "    [%s.containerd.runtimes.%s]\n      runtime_type = 'io.containerd.runc.v2'\n", rt, h)
		fmt.Fprintf(&b, "      [%s.containerd.runtimes.%s.options]\n        BinaryName = %q\n        SystemdCgroup = %t\n", rt, h, c.Runc, c.SystemdCgroup)
	}
	fmt.Fprintf(&b, "  [%s.cni]\n    bin_dirs = [%q]\n    conf_dir = %q\n\n", rt, c.CNIBinDir, c.CNIConfDir)
	b.WriteString("[plugins.'io.containerd.nri.v1.nri']\n")
	if n := c.NRI; n != nil {
		fmt.Fprintf(&b, "  disable = false\n  socket_path = %q\n  plugin_path = %q\n  plugin_config_path = %q\n", n.Socket, n.PluginPath, n.PluginConfigPath)
		if n.RequestTimeout != "" {
			fmt.Fprintf(&b, "  plugin_request_timeout = %q\n", n.RequestTimeout)
		}
	} else {
		b.WriteString("  disable = true\n")
	}
	fmt.Fprintf(&b, "[plugins.'io.containerd.internal.v1.opt']\n  path = %q\n", c.OptDir)
	fmt.Fprintf(&b, "[plugins.'io.containerd.shim.v1.manager']\n  socket_dir = %q\n", c.ShimSocketDir)
	if c.ImageVerifierDir != "" {
		fmt.Fprintf(&b, "[plugins.'io.containerd.image-verifier.v1.bindir']\n  bin_dir = %q\n", c.ImageVerifierDir)
	}
	return b.String()
}

// WriteHostsTOML writes certsDir/<host>/hosts.toml for each host, sending
// its pulls to the test registry (host:port) over plain HTTP.
func WriteHostsTOML(certsDir, registry string, hosts []string) error {
	for _, h := range hosts {
		d := filepath.Join(certsDir, h)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		text := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+h, "http://"+registry)
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteDefaultNetwork writes, into confDir, berth's default network as
// berth's own code renders it (bridge, subnet, host-local's data in
// ipamDir): a containerd on it leaves the same host state as a berth.
// It returns the conflist.
func WriteDefaultNetwork(confDir, bridge, subnet, ipamDir string) ([]byte, error) {
	conflist, err := network.DefaultNetwork{Name: "berth", Bridge: bridge, Subnet: subnet, DataDir: ipamDir}.Conflist()
	if err != nil {
		return nil, err
	}
	for _, d := range []string{confDir, ipamDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return conflist, os.WriteFile(filepath.Join(confDir, network.DefaultNetworkFile), conflist, 0o644)
}

// CheckContainerd fails unless containerd, its runc shim (both in dir) and
// runc are there.
func CheckContainerd(dir, runc string) error {
	for _, b := range []string{filepath.Join(dir, "containerd"), filepath.Join(dir, "containerd-shim-runc-v2"), runc} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%w (hack/install-containerd builds it)", err)
		}
	}
	return nil
}

// HasCapSysResource says whether this process may lower oom_score_adj:
// where it may not (a container's root), containerd must clamp the scores
// it is given instead of failing every container.
func HasCapSysResource() bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}

// NetnsDir is where containerd's CRI pins pod network namespaces, whatever
// its root (unless NetnsUnderState).
const NetnsDir = "/run/netns"

// NetnsNames lists the pins in NetnsDir.
func NetnsNames() map[string]bool {
	names := map[string]bool{}
	entries, _ := os.ReadDir(NetnsDir)
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
}

// RemoveNewNetns unpins and removes the pod network namespaces (cni-*)
// pinned in NetnsDir since before was taken, each a leak; it returns
// their number.
func RemoveNewNetns(log *slog.Logger, before map[string]bool) int {
	leaks := 0
	for name := range NetnsNames() {
		if before[name] || !strings.HasPrefix(name, "cni-") {
			continue
		}
		p := filepath.Join(NetnsDir, name)
		log.Error("LEAK: pod network namespace left pinned: removed", "path", p)
		leaks++
		_ = unix.Unmount(p, unix.MNT_DETACH)
		_ = os.Remove(p)
	}
	return leaks
}
