package main

import (
	"bufio"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/kubehost"
	"github.com/berth-runtime/berth/test/runtimeharness"
)

// host is what was there before the run, so that what the run left can be
// told apart from what others have.
type host struct {
	work          string
	parent        string   // the runtime's default cgroup parent, /berth or /k8s.io
	parentExisted bool     //
	cgroups       []string // pod and container cgroups under the parent
	shm           []int    // System V shared memory segment ids
}

func snapshotHost(work, parent string) *host {
	return &host{work: work, parent: parent, parentExisted: len(parentDirs(parent)) > 0, cgroups: childCgroups(parent), shm: shmSegments(func(size, attached int) bool { return true })}
}

// parentDirs lists the parent's directories that exist: one per v1
// hierarchy, or the one of the unified hierarchy.
func parentDirs(parent string) []string { return kubehost.CgroupDirs("/" + parent) }

// childCgroups lists the cgroups directly under the parent, in every hierarchy.
func childCgroups(parent string) []string {
	var out []string
	for _, p := range parentDirs(parent) {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	return out
}

// shmSegments lists the ids of the segments for which keep is true of
// their size and number of attaches.
func shmSegments(keep func(size, attached int) bool) []int {
	f, err := os.Open("/proc/sysvipc/shm")
	if err != nil {
		return nil
	}
	defer f.Close()
	var ids []int
	s := bufio.NewScanner(f)
	for s.Scan() {
		// key shmid perms size cpid lpid nattch ...; the first line is the header.
		fields := strings.Fields(s.Text())
		if len(fields) < 7 {
			continue
		}
		id, err1 := strconv.Atoi(fields[1])
		size, err2 := strconv.Atoi(fields[3])
		attached, err3 := strconv.Atoi(fields[6])
		if err1 == nil && err2 == nil && err3 == nil && keep(size, attached) {
			ids = append(ids, id)
		}
	}
	return ids
}

// clean reports and removes, each step whatever the one before found, what
// the run left: processes naming the temp dir (monitors), new cgroups under
// the runtime's cgroup parent and what runs in them, mounts under the temp dir (netns pins, shm,
// rootfs, volumes), interfaces on the bridge, iptables rules naming the
// subnet. It returns the number of leaks. The segments critest's HostIpc
// specs make on the host with ipcmk and never remove are removed without
// counting: they are not berth's.
func (h *host) clean(log *slog.Logger, b runtime) int {
	leaks := runtimeharness.NewLeaks(log)
	leaks.KillProcs(hostcheck.ProcsNaming(h.work))
	h.cleanCgroups(leaks, b.ids())
	leaks.Unmount(hostcheck.MountsUnder(h.work), nil)
	if ports, err := os.ReadDir(filepath.Join("/sys/class/net", bridge, "brif")); err == nil {
		for _, p := range ports {
			leaks.Add("interface on the bridge", "bridge", bridge, "interface", p.Name())
		}
		if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
			leaks.Add("bridge not deleted", "bridge", bridge, "error", strings.TrimSpace(string(out)))
		}
	}
	// Bridge masquerade and portmap DNAT rules name the subnet.
	prefix := strings.TrimSuffix(subnet, "0.0/16")
	if rules, err := exec.Command("iptables-save").Output(); err == nil {
		for _, r := range strings.Split(string(rules), "\n") {
			if strings.Contains(r, prefix) {
				leaks.Add("iptables rule", "rule", r)
			}
		}
	}
	for _, id := range shmSegments(func(size, attached int) bool { return size == 1<<20 && attached == 0 }) {
		if !slices.Contains(h.shm, id) {
			_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
		}
	}
	leaks.RemoveWorkDir(h.work)
	return leaks.Count()
}

// cleanCgroups removes the new cgroups under the parent and kills what
// runs in them, each a leak. A new cgroup whose id the runtime never named
// is only reported: it may be another runtime's (a berth of hack/run on
// the same parent).
func (h *host) cleanCgroups(leaks *runtimeharness.Leaks, named map[string]bool) {
	for _, d := range childCgroups(h.parent) {
		if slices.Contains(h.cgroups, d) {
			continue
		}
		if !named[filepath.Base(d)] {
			leaks.Add("cgroup not named by the runtime under test (left alone; another runtime's?)", "cgroup", d)
			continue
		}
		procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		var pids []int
		for _, p := range strings.Fields(string(procs)) {
			pid, _ := strconv.Atoi(p)
			pids = append(pids, pid)
		}
		leaks.KillProcs(pids)
		leaks.Add("cgroup", "cgroup", d)
		for i := 0; i < 20 && os.Remove(d) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !h.parentExisted {
		for _, p := range parentDirs(h.parent) {
			_ = os.Remove(p)
		}
	}
}
