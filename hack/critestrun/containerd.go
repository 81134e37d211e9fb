package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/network"
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
	process
}

// netnsDir is where containerd pins pod network namespaces, whatever its
// root: those it leaves are leaks.
const netnsDir = "/run/netns"

func netnsNames() map[string]bool {
	names := map[string]bool{}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
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
func (c *containerd) ids() map[string]bool { return idsIn(c.logPath(), "") }

func (c *containerd) config() string {
	r := c.root()
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'registry.k8s.io/pause:3.9'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[5]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = %[15]t
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[6]q
        SystemdCgroup = %[7]t
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[8]q]
    conf_dir = %[9]q

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %[10]q
  plugin_path = %[11]q
  plugin_config_path = %[12]q
  plugin_request_timeout = '10s'
[plugins.'io.containerd.internal.v1.opt']
  path = %[13]q
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = %[14]q
`, filepath.Join(r, "root"), filepath.Join(r, "state"), c.socket(), c.socket()+".ttrpc",
		filepath.Join(r, "certs.d"), c.runc, c.cgroupDriver == "systemd", c.cniBinDir, filepath.Join(r, "net.d"),
		c.nriSocket(), filepath.Join(c.work, "nri/plugins"), filepath.Join(c.work, "nri/conf.d"),
		filepath.Join(r, "opt"), filepath.Join(c.work, "s"), !hasCapSysResource())
}

// hasCapSysResource says whether this process may lower oom_score_adj:
// where it may not (the development machine's root), containerd must
// clamp the scores it is given instead of failing every container.
func hasCapSysResource() bool {
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

// writeFiles writes the mirrors, the network and the configuration.
func (c *containerd) writeFiles(logs string) (string, error) {
	r := c.root()
	for _, d := range []string{"net.d", "ipam", "tmp"} {
		if err := os.MkdirAll(filepath.Join(r, d), 0o755); err != nil {
			return "", err
		}
	}
	for _, h := range mirrored {
		hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+h, "http://"+c.registry)
		d := filepath.Join(r, "certs.d", h)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			return "", err
		}
	}
	conflist, err := network.DefaultNetwork{Name: "berth", Bridge: bridge, Subnet: subnet, DataDir: filepath.Join(r, "ipam")}.Conflist()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(r, "net.d", network.DefaultNetworkFile), conflist, 0o644); err != nil {
		return "", err
	}
	cfg := filepath.Join(r, "config.toml")
	if err := os.WriteFile(cfg, []byte(c.config()), 0o644); err != nil {
		return "", err
	}
	copyFile(cfg, filepath.Join(logs, "config.toml"))
	return cfg, nil
}

func (c *containerd) start(ctx context.Context, log *slog.Logger, logs string) error {
	bin := filepath.Join(c.dir, "containerd")
	for _, b := range []string{bin, filepath.Join(c.dir, "containerd-shim-runc-v2"), c.runc} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%w (hack/install-containerd builds it)", err)
		}
	}
	c.netns = netnsNames()
	cfg, err := c.writeFiles(logs)
	if err != nil {
		return err
	}
	out, err := os.Create(c.logPath())
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, "--config", cfg, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = out, out
	// The shim is found on PATH, next to containerd; runc is in the config.
	cmd.Env = append(os.Environ(), "PATH="+c.dir+":"+os.Getenv("PATH"), "TMPDIR="+filepath.Join(c.root(), "tmp"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.name = "containerd"
	if err := c.startAndWait(ctx, cmd, c.endpoint(), 60*time.Second); err != nil {
		return err
	}
	version, _ := exec.Command(bin, "--version").Output()
	log.Info("containerd started", "version", strings.TrimSpace(string(version)), "pid", c.cmd.Process.Pid, "socket", c.socket(), "registry", c.registry)
	return nil
}

// stop removes what failed specs left, then stops containerd: SIGTERM,
// SIGKILL after 20 s. Shims that outlive it name the work dir on their
// command lines: the host check kills and counts them. Pod network
// namespaces left pinned are counted and removed here.
func (c *containerd) stop(log *slog.Logger) int {
	if c.cmd == nil {
		return 0
	}
	if dead := c.process.stop(log, c.endpoint(), 20*time.Second); dead > 0 {
		return dead
	}
	leaks := 0
	for name := range netnsNames() {
		if c.netns[name] || !strings.HasPrefix(name, "cni-") {
			continue
		}
		p := filepath.Join(netnsDir, name)
		log.Error("LEAK: pod network namespace left pinned: removed", "path", p)
		leaks++
		_ = unix.Unmount(p, unix.MNT_DETACH)
		_ = os.Remove(p)
	}
	return leaks
}
