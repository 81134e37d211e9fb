package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/kubehost"
	"github.com/berth-runtime/berth/test/runtimeharness"
)

// signalled is the cause of a run's end by SIGINT or SIGTERM.
type signalled struct{ sig syscall.Signal }

func (s signalled) Error() string { return "stopped by " + s.sig.String() }

// exitCode is the shell's: 128 + the signal.
func (s signalled) exitCode() int { return 128 + int(s.sig) }

// signalContext is cancelled, its cause a signalled, on SIGINT or SIGTERM.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if s, ok := <-ch; ok {
			cancel(signalled{s.(syscall.Signal)})
		}
	}()
	return ctx, func() { signal.Stop(ch); close(ch); cancel(nil) }
}

const (
	compareBridge = "bbench0"
	compareSubnet = "10.250.0.0/16"
	sandboxImage  = "registry.k8s.io/pause:3.9"
)

// mirrored are the registries both runtimes pull from the local registry.
var mirrored = []string{"docker.io", "registry.k8s.io"}

// compareHost is what a comparison run makes on the host, and undoes.
type compareHost struct {
	log *slog.Logger
	// work is short: unix socket paths under it must fit in 108 bytes.
	work          string
	bridgeExisted bool
	// cgroupRoot is the pods' cgroupfs parent.
	cgroupRoot string
	// netName is the CNI network's name: the plugins name it in the
	// comment of every iptables rule they add for a pod, which is how
	// restore finds ours, and only ours.
	netName string
	cniBin  string
	daemons []*runtimeharness.Daemon
	leaks   *runtimeharness.Leaks
}

func newCompareHost(log *slog.Logger) (*compareHost, error) {
	work, err := os.MkdirTemp("/tmp", "bbench.")
	if err != nil {
		return nil, err
	}
	_, err = net.InterfaceByName(compareBridge)
	return &compareHost{
		log: log, work: work, bridgeExisted: err == nil,
		cgroupRoot: fmt.Sprintf("/bbench-%d", os.Getpid()), netName: fmt.Sprintf("bbench-%d", os.Getpid()),
		leaks: runtimeharness.NewLeaks(log),
	}, nil
}

// prepare makes the volatile-state tmpfs and one CNI conf dir per chain.
func (h *compareHost) prepare(cniBin string) error {
	h.cniBin = cniBin
	for _, d := range []string{"ipam", "run"} {
		if err := os.MkdirAll(filepath.Join(h.work, d), 0o755); err != nil {
			return err
		}
	}
	// Volatile state (berth's state, containerd's state) on a tmpfs, as
	// /run is on a node; the persistent roots (images, containerd's
	// metadata) on disk, where this VM's /run is too (an fsync ~4 ms).
	if err := unix.Mount("bbench-run", filepath.Join(h.work, "run"), "tmpfs", 0, "mode=0711,size=2g"); err != nil {
		return fmt.Errorf("mount the state tmpfs: %w", err)
	}
	for _, c := range chains {
		dir := filepath.Join(h.work, "cni-"+c.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "10-bench.conflist"), []byte(h.conflist(c)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// conflist is the chain's network: no masquerade, so that a pod adds no
// nat rule; portmap adds its chains only for pods with host ports.
func (h *compareHost) conflist(c chain) string {
	extra := ""
	if c.portmap {
		extra = `, {"type": "portmap", "capabilities": {"portMappings": true}}`
	}
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
    }%s
  ]
}
`, h.netName, compareBridge, compareSubnet, filepath.Join(h.work, "ipam"), extra)
}

func (h *compareHost) berthConfig(c chain) string {
	return filepath.Join(h.work, "berth-"+c.name, "config.toml")
}

// startDaemons starts berth and containerd on chain c, each on roots of
// its own; both are stopped by stopDaemons or restore, also on failure.
func (h *compareHost) startDaemons(ctx context.Context, c chain, o *compareOptions, ctrd containerdInstall, reg string) (berth, containerd *runtimeharness.Daemon, err error) {
	bdir, brun := filepath.Join(h.work, "berth-"+c.name), filepath.Join(h.work, "run", "berth-"+c.name)
	cdir, crun := filepath.Join(h.work, "ctrd-"+c.name), filepath.Join(h.work, "run", "ctrd-"+c.name)
	for _, d := range []string{bdir, brun, cdir, crun} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, nil, err
		}
	}
	confDir := filepath.Join(h.work, "cni-"+c.name)
	bcfg := runtimeharness.BerthConfig{
		Socket: filepath.Join(brun, "berth.sock"), Root: filepath.Join(bdir, "root"), State: filepath.Join(brun, "state"),
		CNIConfDir: confDir, CNIBinDir: h.cniBin, Registry: reg, Mirrored: mirrored,
	}
	if err := runtimeharness.WriteConfig(h.berthConfig(c), []byte(bcfg.TOML())); err != nil {
		return nil, nil, err
	}
	certs := filepath.Join(cdir, "certs.d")
	if err := runtimeharness.WriteHostsTOML(certs, reg, mirrored); err != nil {
		return nil, nil, err
	}
	// containerd's defaults everywhere else, as a node runs it; root here
	// may lack CAP_SYS_RESOURCE: clamp oom_score_adj instead of failing.
	ccfg := runtimeharness.ContainerdConfig{
		Root: filepath.Join(cdir, "root"), State: filepath.Join(crun, "state"), Socket: filepath.Join(crun, "containerd.sock"),
		SandboxImage: sandboxImage, CertsDir: certs, Runc: ctrd.runc, RestrictOOMScoreAdj: true,
		CNIBinDir: h.cniBin, CNIConfDir: confDir, OptDir: filepath.Join(cdir, "opt"),
		ShimSocketDir: filepath.Join(crun, "s"), ImageVerifierDir: filepath.Join(cdir, "image-verifier"),
	}
	ccfgPath := filepath.Join(cdir, "config.toml")
	if err := runtimeharness.WriteConfig(ccfgPath, []byte(ccfg.TOML())); err != nil {
		return nil, nil, err
	}
	berth = &runtimeharness.Daemon{
		Name: "berth", Argv: []string{o.berth, "--config", h.berthConfig(c)}, Endpoint: "unix://" + bcfg.Socket,
		LogPath: filepath.Join(h.work, "berth-"+c.name+".log"), ReadyIn: 30 * time.Second, OwnGroup: true,
	}
	// The shim is found on PATH; runc is named in the config.
	containerd = &runtimeharness.Daemon{
		Name: "containerd", Argv: []string{filepath.Join(ctrd.dir, "containerd"), "--config", ccfgPath},
		Env: []string{"PATH=" + ctrd.dir + ":" + os.Getenv("PATH")}, Endpoint: "unix://" + ccfg.Socket,
		LogPath: filepath.Join(h.work, "containerd-"+c.name+".log"), ReadyIn: 30 * time.Second, OwnGroup: true,
	}
	for _, d := range []*runtimeharness.Daemon{berth, containerd} {
		h.daemons = append(h.daemons, d)
		if err := d.Start(ctx); err != nil {
			return nil, nil, fmt.Errorf("%w\n%s", err, logTail(d.LogPath, 30))
		}
	}
	return berth, containerd, nil
}

// logTail is the last n lines of a daemon's log, for an error.
func logTail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// stopDaemons stops the daemons (SIGTERM, SIGKILL after 10 s) and kills
// what they left running.
func (h *compareHost) stopDaemons() {
	for _, d := range h.daemons {
		h.leaks.AddLogged(d.Stop(h.log, 10*time.Second, nil))
	}
	h.daemons = nil
	h.killLeftovers()
}

// killLeftovers kills the processes the daemons left: shims and monitors
// name the work dir on their command line; pause and containers live in
// the run's cgroups. This program's own processes are not theirs.
func (h *compareHost) killLeftovers() {
	self, _ := os.Executable()
	pids := hostcheck.Procs(func(cmd, cg string) bool {
		return strings.Contains(cmd, h.work+"/") || strings.Contains(cg, h.cgroupRoot+"/") || strings.Contains(cg, "/berth-timings-")
	})
	var theirs []int
	for _, pid := range pids {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe != self {
			theirs = append(theirs, pid)
		}
	}
	h.leaks.KillProcs(theirs)
}

// restore undoes everything the run made; what a runtime should have
// removed itself is logged as a leak. Every step runs.
func (h *compareHost) restore() {
	h.stopDaemons()
	run := filepath.Join(h.work, "run")
	h.leaks.Unmount(hostcheck.MountsUnder(h.work), func(m string) bool { return m == run })
	h.leaks.AddLogged(kubehost.RemoveCgroupPath(h.log, h.cgroupRoot))
	if !h.bridgeExisted {
		h.leaks.DeleteLinks(compareBridge)
	}
	// No rule is expected (no ipMasq, no host ports); a failed run may
	// leave some.
	if err := h.leaks.DeleteNATRules(`name: \"` + h.netName + `\"`); err != nil {
		h.leaks.Add("delete nat rules", "error", err)
	}
	h.leaks.RemoveWorkDir(h.work)
	if n := h.leaks.Count(); n > 0 {
		h.log.Error("the run left things behind (removed)", "leaks", n)
	}
}

// compareExitCode is the exit status of a compare run that failed.
func compareExitCode(err error) int {
	var s signalled
	if errors.As(err, &s) {
		return s.exitCode()
	}
	return 1
}
