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

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/network"
	"github.com/berth-runtime/berth/test/hostcheck"
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

	root   string
	netns  map[string]bool // /run/netns before the run
	cmd    *exec.Cmd
	done   chan struct{}
	logOut *os.File
}

func (c *containerd) name() string          { return "containerd" }
func (c *containerd) endpoint() string      { return "unix://" + filepath.Join(c.root, "containerd.sock") }
func (c *containerd) links() []string       { return []string{berthBridge} }
func (c *containerd) natPrefixes() []string { return []string{netPrefix} }

const netnsDir = "/run/netns"

func (c *containerd) config() string {
	r := c.root
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
    sandbox = 'registry.k8s.io/pause:3.10.2'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[5]q

[plugins.'io.containerd.cri.v1.runtime']
  # root here lacks CAP_SYS_RESOURCE: clamp oom_score_adj instead of failing
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[6]q
        SystemdCgroup = false
    # The RuntimeClass and PodOverhead specs' handler, as containerd's own
    # node e2e configuration has it.
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.test-handler]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.test-handler.options]
        BinaryName = %[6]q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q

[plugins.'io.containerd.internal.v1.opt']
  path = %[9]q
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = %[10]q
[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = %[11]q
`, filepath.Join(r, "root"), filepath.Join(r, "state"), filepath.Join(r, "containerd.sock"), filepath.Join(r, "containerd.sock.ttrpc"),
		c.certsD, c.runc, c.cniBinDir, filepath.Join(r, "net.d"), filepath.Join(r, "opt"), c.shimSocketDir(), filepath.Join(r, "image-verifier"))
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
	for _, b := range []string{bin, filepath.Join(c.dir, "containerd-shim-runc-v2"), c.runc} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%w (hack/install-containerd builds it)", err)
		}
	}
	c.root = filepath.Join(c.work, "containerd")
	for _, d := range []string{"net.d", "ipam", "tmp"} {
		if err := os.MkdirAll(filepath.Join(c.root, d), 0o755); err != nil {
			return err
		}
	}
	c.netns = map[string]bool{}
	if entries, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range entries {
			c.netns[e.Name()] = true
		}
	}
	conflist, err := network.DefaultNetwork{Name: "berth", Bridge: berthBridge, Subnet: berthSubnet, DataDir: filepath.Join(c.root, "ipam")}.Conflist()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.root, "net.d", network.DefaultNetworkFile), conflist, 0o644); err != nil {
		return err
	}
	cfg := c.config()
	cfgPath := filepath.Join(c.root, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	os.WriteFile(filepath.Join(c.out, "containerd-config.toml"), []byte(cfg), 0o644)
	os.WriteFile(filepath.Join(c.out, "cni.conflist"), conflist, 0o644)
	logf, err := os.Create(filepath.Join(c.out, "containerd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	c.cmd = exec.Command(bin, "--config", cfgPath, "--log-level", "debug")
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// The shim is found on PATH (next to containerd); runc is in the config.
	c.cmd.Env = append(os.Environ(), "PATH="+c.dir+":"+os.Getenv("PATH"), "TMPDIR="+filepath.Join(c.root, "tmp"))
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		return err
	}
	c.done = make(chan struct{})
	go func() { c.cmd.Wait(); close(c.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-c.done:
			return fmt.Errorf("containerd exited during start-up (%v); its log: %s", c.cmd.ProcessState, filepath.Join(c.out, "containerd.log"))
		default:
		}
		if err := hostcheck.Ping(ctx, c.endpoint()); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("containerd not answering on %s after 60s: %w", c.endpoint(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	v, _ := exec.Command(bin, "--version").Output()
	log.Info("containerd up", "pid", c.cmd.Process.Pid, "version", strings.TrimSpace(string(v)), "endpoint", c.endpoint(), "registry-config-path", c.certsD)
	return nil
}

func (c *containerd) stop(log *slog.Logger) int {
	if c.cmd == nil || c.done == nil {
		return 0
	}
	leaks := 0
	select {
	case <-c.done:
		log.Error("containerd died during the run", "state", c.cmd.ProcessState.String())
		leaks++
	default:
		leaks += removeLeft(log, c.endpoint())
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			log.Error("containerd did not stop in 20s: SIGKILL")
			c.cmd.Process.Kill()
			<-c.done
		}
	}
	// Shims of pods not removed outlive containerd (their command lines
	// name the work dir: the host restore kills and counts them).
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if c.netns[e.Name()] || !strings.HasPrefix(e.Name(), "cni-") {
			continue
		}
		p := filepath.Join(netnsDir, e.Name())
		log.Error("LEAK: pod network namespace left: removed", "path", p)
		leaks++
		unix.Unmount(p, unix.MNT_DETACH)
		os.Remove(p)
	}
	return leaks
}
