package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/kubehost"
)

// Ports the suite's kubelet (healthz, server, read-only) and API server
// bind, fixed in the suite.
var suitePorts = []int{10248, 10250, 10255, 6443}

func checkPorts() error {
	if err := hostcheck.PortsFree(suitePorts...); err != nil {
		return fmt.Errorf("a port the suite's kubelet or API server binds: %w", err)
	}
	return nil
}

// The node IP: the kubelet refuses a loopback one (this host's name
// resolves to 127.0.0.1), so it is on an empty bridge of this run's own.
const (
	netPrefix = "10.219."
	nodeLink  = "berth-e2e-node"
	nodeAddr  = "10.219.255.1"
)

func makeNodeIP(log *slog.Logger) (string, error) {
	for _, l := range []string{nodeLink, berthBridge} {
		if _, err := net.InterfaceByName(l); err == nil {
			log.Warn("a previous run's link exists: deleting it", "link", l)
			exec.Command("ip", "link", "del", l).Run()
		}
	}
	if err := netFree(); err != nil {
		return "", err
	}
	for _, args := range [][]string{
		{"link", "add", nodeLink, "type", "bridge"},
		{"addr", "add", nodeAddr + "/32", "dev", nodeLink},
		{"link", "set", nodeLink, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nodeAddr, nil
}

// netFree fails if an address or route of the host is in 10.219.0.0/16,
// the node IP's and the pod network's range.
func netFree() error {
	for _, args := range [][]string{{"-o", "-4", "addr"}, {"-4", "route", "show", "table", "all"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, " "+netPrefix) || strings.HasPrefix(line, netPrefix) {
				return fmt.Errorf("10.219.0.0/16 is in use on this host (%s): is another run up?", line)
			}
		}
	}
	return nil
}

// The kernel settings the kubelet's container manager writes.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Host paths the suite's kubelet writes: its root dir (fixed by the suite),
// the pod log dir and the legacy container log links.
var kubeletHostDirs = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers"}

// Top-level cgroups the kubelet makes with cgroupRoot "/" (kubepods, the
// suite's --kubelet-cgroups /kubelet); only these names are removed, others
// may be another test's.
var kubeletCgroups = []string{"kubepods", "kubelet", "system"}

type hostState struct {
	sysctls     map[string]string
	chains      map[string]bool // "iptables/nat/KUBE-X"
	entries     map[string]bool // every path under kubeletHostDirs
	cgroups     map[string]bool // /sys/fs/cgroup/<h>/<name> of kubeletCgroups
	mounts      map[string]bool // mount points under kubeletHostDirs
	links       []string        // interfaces of this run, deleted at the end
	natPrefixes []string        // pod subnet prefixes: nat rules naming them are leaks
}

func snapshotHost() (*hostState, error) {
	s := &hostState{sysctls: map[string]string{}, chains: map[string]bool{}, entries: map[string]bool{}, cgroups: map[string]bool{}, mounts: map[string]bool{}}
	for _, m := range hostcheck.MountsUnder(kubeletHostDirs...) {
		s.mounts[m] = true
	}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, fmt.Errorf("read sysctl: %w", err)
		}
		s.sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, c := range kubehost.KubeChains() {
		s.chains[c] = true
	}
	for p := range walkHostDirs() {
		s.entries[p] = true
	}
	for _, d := range kubeletCgroupDirs() {
		s.cgroups[d] = true
	}
	return s, nil
}

func walkHostDirs() map[string]bool {
	m := map[string]bool{}
	for _, dir := range kubeletHostDirs {
		filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				m[p] = true
			}
			return nil
		})
	}
	return m
}

func kubeletCgroupDirs() []string {
	var out []string
	for _, name := range kubeletCgroups {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
		out = append(out, dirs...)
		if st, err := os.Stat("/sys/fs/cgroup/" + name); err == nil && st.IsDir() {
			out = append(out, "/sys/fs/cgroup/"+name)
		}
	}
	return out
}

// restore undoes what the run changed and returns how many things were
// left that should not have been (what the kubelet always leaves, its
// sysctls, chains and dirs, is undone without counting). Every step runs.
func (s *hostState) restore(log *slog.Logger, work, kubelet string) int {
	leaks := 0
	leak := func(msg string, args ...any) { log.Error("LEAK: "+msg, args...); leaks++ }

	// Processes of this run: the runtime's (their command lines name the
	// work dir) and the suite's kubelet if still up. The suite's services
	// process stops the kubelet and exits a few seconds after its parent
	// test process: give it that.
	for deadline := time.Now().Add(15 * time.Second); len(suiteProcs(work, kubelet)) > 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	for _, pid := range suiteProcs(work, kubelet) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		leak("process left: killed", "pid", pid, "cmdline", strings.ReplaceAll(strings.TrimSpace(string(cmd)), "\x00", " "))
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// Mounts under the kubelet's dirs and the work dir (volumes, pod rootfs),
	// deepest first. The kubelet's bind mount of its root dir onto itself
	// (made shared for mount propagation) it never undoes: not counted.
	for _, m := range hostcheck.MountsUnder(append(slices.Clone(kubeletHostDirs), work)...) {
		if s.mounts[m] {
			continue
		}
		if m != "/var/lib/kubelet" {
			leak("mount left: unmounted", "path", m)
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			leak("could not unmount", "path", m, "error", err)
		}
	}
	for k, v := range s.sysctls {
		b, _ := os.ReadFile("/proc/sys/" + k)
		if strings.TrimSpace(string(b)) != v {
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				leak("sysctl not restored", "key", k, "value", v, "error", err)
			}
		}
	}
	for _, c := range kubehost.KubeChains() {
		if !s.chains[c] {
			if err := kubehost.DeleteChain(c); err != nil {
				log.Error("delete chain", "chain", c, "error", err)
			}
		}
	}
	var created []string
	for p := range walkHostDirs() {
		if !s.entries[p] {
			created = append(created, p)
		}
	}
	slices.SortFunc(created, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range created {
		if err := os.RemoveAll(p); err != nil {
			leak("could not remove", "path", p, "error", err)
		}
	}
	for _, d := range kubeletCgroupDirs() {
		if !s.cgroups[d] {
			leaks += kubehost.RemoveCgroupTree(log, d)
		}
	}
	for _, prefix := range s.natPrefixes {
		rules, err := kubehost.DeleteNATRulesNaming(prefix)
		if err != nil {
			log.Error("delete nat rules", "prefix", prefix, "error", err)
		}
		for _, r := range rules {
			leak("iptables rule naming the pod subnet left: deleted", "rule", r)
		}
	}
	for _, l := range s.links {
		if _, err := net.InterfaceByName(l); err == nil {
			if out, err := exec.Command("ip", "link", "del", l).CombinedOutput(); err != nil {
				leak("could not delete link", "link", l, "error", err, "out", string(out))
			}
		}
	}
	if len(hostcheck.MountsUnder(work)) == 0 {
		os.RemoveAll(work)
	} else {
		leak("mounts remain under the work dir: kept", "dir", work)
	}
	return leaks
}

// suiteProcs lists processes whose command line contains work, and the
// kubelet binary given running on the suite's root dir (the lock is held:
// no other test runs that one there; a kind node's kubelet is another binary).
func suiteProcs(work, kubelet string) []int {
	return hostcheck.Procs(func(cmd, _ string) bool {
		argv0, _, _ := strings.Cut(cmd, "\x00")
		return strings.Contains(cmd, work) || argv0 == kubelet && strings.Contains(cmd, "\x00--root-dir\x00/var/lib/kubelet\x00")
	})
}
