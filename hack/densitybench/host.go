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

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/kubehost"
)

// The benchmark's addresses: the pods' subnet (a /22: 250 pods and the
// gateway do not fit a /24) and the node IP, which the kubelet wants
// non-loopback, on an empty bridge of its own. All in 10.216.0.0/16.
const (
	netPrefix = "10.216."
	podSubnet = "10.216.0.0/22"
	podBridge = "bdens0"
	nodeLink  = "bdens-node"
	nodeAddr  = "10.216.255.1"
)

// The kernel settings the kubelet's container manager writes.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Host paths a kubelet writes whatever its --root-dir: the device plugin
// dir and the legacy log links. (containerd's netns pins are under the work
// dir: netns_mounts_under.)
var hostDirs = []string{"/var/lib/kubelet", "/var/log/containers"}

// host is what of the machine a run may change, recorded before it.
type host struct {
	sysctls map[string]string
	chains  map[string]bool
	entries map[string]bool
	cgroup  string // the kubelet's cgroupRoot, made by the run
	work    string
}

func snapshotHost(work, cgroup string) (*host, error) {
	for _, l := range []string{nodeLink, podBridge} {
		if _, err := net.InterfaceByName(l); err == nil {
			return nil, fmt.Errorf("link %s exists: another density run is up, or one was killed (ip link del %s)", l, l)
		}
	}
	if err := netFree(); err != nil {
		return nil, err
	}
	h := &host{sysctls: map[string]string{}, chains: map[string]bool{}, entries: walk(hostDirs), cgroup: cgroup, work: work}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, fmt.Errorf("read sysctl: %w", err)
		}
		h.sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, c := range kubehost.KubeChains() {
		h.chains[c] = true
	}
	return h, nil
}

// netFree fails if an address or route of the host is in 10.216.0.0/16.
func netFree() error {
	for _, args := range [][]string{{"-o", "-4", "addr"}, {"-4", "route", "show", "table", "all"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, " "+netPrefix) || strings.HasPrefix(line, netPrefix) {
				return fmt.Errorf("10.216.0.0/16 is in use on this host (%s)", line)
			}
		}
	}
	return nil
}

func walk(dirs []string) map[string]bool {
	m := map[string]bool{}
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				m[p] = true
			}
			return nil
		})
	}
	return m
}

func makeNodeIP() error {
	for _, args := range [][]string{
		{"link", "add", nodeLink, "type", "bridge"}, // no dummy module on this kernel
		{"addr", "add", nodeAddr + "/32", "dev", nodeLink},
		{"link", "set", nodeLink, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// makeCgroupRoot creates the kubelet's cgroupRoot in every hierarchy, as
// the kubelet wants it to exist; cpuset gets its parent's cpus and mems.
func makeCgroupRoot(path string) error {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return err
	}
	for _, e := range entries {
		h := filepath.Join("/sys/fs/cgroup", e.Name())
		if !e.IsDir() {
			continue // cpu and cpuacct may be links to cpu,cpuacct
		}
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue
		}
		if err := os.MkdirAll(h+path, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", h+path, err)
		}
		if strings.Contains(e.Name(), "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, _ := os.ReadFile(filepath.Join(h, f))
				os.WriteFile(filepath.Join(h+path, f), v, 0o644)
			}
		}
	}
	return nil
}

// restore undoes what the run changed and returns how many things were
// left that the runtime or kubelet should have removed (what a kubelet
// always leaves -- its sysctls, chains, device-plugin dir -- is undone
// without counting). Every step runs.
func (h *host) restore(log *slog.Logger) int {
	leaks := 0
	leak := func(msg string, args ...any) { log.Error("LEAK: "+msg, args...); leaks++ }
	for _, pid := range procsOf(h.work, h.cgroup) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		leak("process left: killed", "pid", pid, "cmdline", strings.ReplaceAll(strings.TrimSpace(string(cmd)), "\x00", " "))
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// The kubelet's bind mount of its root dir onto itself (made shared)
	// it never undoes: not counted. The state tmpfs is the run's own.
	for _, m := range hostcheck.MountsUnder(h.work) {
		if !strings.HasSuffix(m, "/kubelet") && m != filepath.Join(h.work, "run") {
			leak("mount left: unmounted", "path", m)
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			leak("could not unmount", "path", m, "error", err)
		}
	}
	for k, v := range h.sysctls {
		b, _ := os.ReadFile("/proc/sys/" + k)
		if strings.TrimSpace(string(b)) != v {
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				leak("sysctl not restored", "key", k, "value", v, "error", err)
			}
		}
	}
	for _, c := range kubehost.KubeChains() {
		if !h.chains[c] {
			if err := kubehost.DeleteChain(c); err != nil {
				leak("delete chain", "chain", c, "error", err)
			}
		}
	}
	var created []string
	for p := range walk(hostDirs) {
		if !h.entries[p] {
			created = append(created, p)
		}
	}
	slices.SortFunc(created, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range created {
		if err := os.RemoveAll(p); err != nil {
			leak("could not remove", "path", p, "error", err)
		}
	}
	leaks += kubehost.RemoveCgroupPath(log, h.cgroup)
	rules, err := kubehost.DeleteNATRulesNaming(netPrefix)
	if err != nil {
		leak("delete nat rules", "error", err)
	}
	for _, r := range rules {
		leak("iptables rule naming the pod subnet left: deleted", "rule", r)
	}
	for _, l := range []string{podBridge, nodeLink} {
		if _, err := net.InterfaceByName(l); err == nil {
			if out, err := exec.Command("ip", "link", "del", l).CombinedOutput(); err != nil {
				leak("could not delete link", "link", l, "error", err, "out", string(out))
			}
		}
	}
	if out, _ := exec.Command("ip", "-o", "link", "show", "master", podBridge).Output(); len(out) > 0 {
		leak("veths left on the pod bridge", "links", string(out))
	}
	if len(hostcheck.MountsUnder(h.work)) == 0 {
		os.RemoveAll(h.work)
	} else {
		leak("mounts remain under the work dir: kept", "dir", h.work)
	}
	return leaks
}

// procsOf lists the processes whose command line names the work dir
// (daemons, monitors, shims, the kubelet) or that live in a cgroup under
// the kubelet's cgroupRoot (pause, containers).
func procsOf(work, cgroup string) []int {
	return hostcheck.Procs(func(cmd, cg string) bool {
		return strings.Contains(cmd, work) || strings.Contains(cg, ":"+cgroup+"/") || strings.Contains(cg, ":"+cgroup+"\n")
	})
}
