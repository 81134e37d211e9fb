package main

import (
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/kubehost"
	"github.com/berth-runtime/berth/test/runtimeharness"
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
	if err := runtimeharness.NetFree(netPrefix); err != nil {
		return "", err
	}
	if err := runtimeharness.AddNodeIP(nodeLink, nodeAddr); err != nil {
		return "", err
	}
	return nodeAddr, nil
}

// Host paths the suite's kubelet writes: its root dir (fixed by the suite),
// the pod log dir and the legacy container log links.
var kubeletHostDirs = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers"}

// Top-level cgroups the kubelet makes with cgroupRoot "/" (kubepods, the
// suite's --kubelet-cgroups /kubelet); only these names are removed, others
// may be another test's.
var kubeletCgroups = []string{"kubepods", "kubelet", "system"}

type hostState struct {
	kubelet     *runtimeharness.KubeletHost
	cgroups     map[string]bool // /sys/fs/cgroup/<h>/<name> of kubeletCgroups
	mounts      map[string]bool // mount points under kubeletHostDirs
	links       []string        // interfaces of this run, deleted at the end
	natPrefixes []string        // pod subnet prefixes: nat rules naming them are leaks
}

func snapshotHost() (*hostState, error) {
	k, err := runtimeharness.SnapshotKubeletHost(kubeletHostDirs...)
	if err != nil {
		return nil, err
	}
	s := &hostState{kubelet: k, cgroups: map[string]bool{}, mounts: map[string]bool{}}
	for _, m := range hostcheck.MountsUnder(kubeletHostDirs...) {
		s.mounts[m] = true
	}
	for _, d := range kubeletCgroupDirs() {
		s.cgroups[d] = true
	}
	return s, nil
}

func kubeletCgroupDirs() []string {
	var out []string
	for _, name := range kubeletCgroups {
		out = append(out, kubehost.CgroupDirs("/"+name)...)
	}
	return out
}

// restore undoes what the run changed and returns how many things were
// left that should not have been (what the kubelet always leaves, its
// sysctls, chains and dirs, is undone without counting). Every step runs.
func (s *hostState) restore(log *slog.Logger, work, kubelet string) int {
	leaks := runtimeharness.NewLeaks(log)
	// Processes of this run: the runtime's (their command lines name the
	// work dir) and the suite's kubelet if still up. The suite's services
	// process stops the kubelet and exits a few seconds after its parent
	// test process: give it that.
	for deadline := time.Now().Add(15 * time.Second); len(suiteProcs(work, kubelet)) > 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	leaks.KillProcs(suiteProcs(work, kubelet))
	// Mounts under the kubelet's dirs and the work dir (volumes, pod rootfs),
	// deepest first. The kubelet's bind mount of its root dir onto itself
	// (made shared for mount propagation) it never undoes: not counted.
	var mounts []string
	for _, m := range hostcheck.MountsUnder(append(slices.Clone(kubeletHostDirs), work)...) {
		if !s.mounts[m] {
			mounts = append(mounts, m)
		}
	}
	leaks.Unmount(mounts, func(m string) bool { return m == "/var/lib/kubelet" })
	s.kubelet.Restore(leaks, log.Error)
	for _, d := range kubeletCgroupDirs() {
		if !s.cgroups[d] {
			leaks.AddLogged(kubehost.RemoveCgroupTree(log, d))
		}
	}
	for _, prefix := range s.natPrefixes {
		if err := leaks.DeleteNATRules(prefix); err != nil {
			log.Error("delete nat rules", "prefix", prefix, "error", err)
		}
	}
	leaks.DeleteLinks(s.links...)
	leaks.RemoveWorkDir(work)
	return leaks.Count()
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
