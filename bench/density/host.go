package density

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/kubehost"
	"github.com/berth-runtime/berth/test/runtimeharness"
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

// Host paths a kubelet writes whatever its --root-dir: the device plugin
// dir and the legacy log links. (containerd's netns pins are under the work
// dir: netns_mounts_under.)
var hostDirs = []string{"/var/lib/kubelet", "/var/log/containers"}

// host is what of the machine a run may change, recorded before it.
type host struct {
	kubelet *runtimeharness.KubeletHost
	cgroup  string // the kubelet's cgroupRoot, made by the run
	work    string
}

func snapshotHost(work, cgroup string) (*host, error) {
	for _, l := range []string{nodeLink, podBridge} {
		if _, err := net.InterfaceByName(l); err == nil {
			return nil, fmt.Errorf("link %s exists: another density run is up, or one was killed (ip link del %s)", l, l)
		}
	}
	if err := runtimeharness.NetFree(netPrefix); err != nil {
		return nil, err
	}
	k, err := runtimeharness.SnapshotKubeletHost(hostDirs...)
	if err != nil {
		return nil, err
	}
	return &host{kubelet: k, cgroup: cgroup, work: work}, nil
}

func makeNodeIP() error { return runtimeharness.AddNodeIP(nodeLink, nodeAddr) }

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
	leaks := runtimeharness.NewLeaks(log)
	leaks.KillProcs(procsOf(h.work, h.cgroup))
	// The kubelet's bind mount of its root dir onto itself (made shared)
	// it never undoes: not counted. The state tmpfs is the run's own.
	leaks.Unmount(hostcheck.MountsUnder(h.work), func(m string) bool {
		return strings.HasSuffix(m, "/kubelet") || m == filepath.Join(h.work, "run")
	})
	h.kubelet.Restore(leaks, leaks.Add)
	leaks.AddLogged(kubehost.RemoveCgroupPath(log, h.cgroup))
	if err := leaks.DeleteNATRules(netPrefix); err != nil {
		leaks.Add("delete nat rules", "error", err)
	}
	leaks.DeleteLinks(podBridge, nodeLink)
	if out, _ := exec.Command("ip", "-o", "link", "show", "master", podBridge).Output(); len(out) > 0 {
		leaks.Add("veths left on the pod bridge", "links", string(out))
	}
	leaks.RemoveWorkDir(h.work)
	return leaks.Count()
}

// procsOf lists the processes whose command line names the work dir
// (daemons, monitors, shims, the kubelet) or that live in a cgroup under
// the kubelet's cgroupRoot (pause, containers).
func procsOf(work, cgroup string) []int {
	return hostcheck.Procs(func(cmd, cg string) bool {
		return strings.Contains(cmd, work) || strings.Contains(cg, ":"+cgroup+"/") || strings.Contains(cg, ":"+cgroup+"\n")
	})
}
