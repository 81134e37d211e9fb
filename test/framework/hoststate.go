package framework

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/network/cnitest"
)

// HostScope says which parts of the host belong to one test. Other tests
// run on the same host at the same time, so a snapshot looks only at what
// the scope names, unless Global is set.
type HostScope struct {
	// Dirs are searched for files (everything below, see SnapshotHost),
	// mounts at or below them, and processes whose command line or
	// working directory names a path below them.
	Dirs []string
	// CgroupParents are cgroup paths, as a pod's linux.cgroup_parent
	// names them: every directory below one, in every hierarchy, and
	// every process in one.
	CgroupParents []string
	// Bridges are host bridges whose ports (the host ends of pod veths)
	// are listed.
	Bridges []string
	// Networks are CNI network names whose host-local leases are listed,
	// in each of LeaseDirs (host-local's dataDir) and in the plugin's
	// default /var/lib/cni/networks.
	Networks  []string
	LeaseDirs []string
	// NAT adds the Networks' rules in the nat table (the bridge plugin's
	// masquerading and portmap's DNAT, each commented with the network's
	// name), left by a pod whose CNI DEL never ran. Off by default: a
	// test that simulates a reboot keeps the kernel's rules that a real
	// one would drop. It costs an iptables-save (~10 ms).
	NAT bool
	// Subnets are the Networks' pod subnets: with NAT, the firewall
	// plugin's rules for their addresses (filter table, CNI-FORWARD) are
	// listed too.
	Subnets []*net.IPNet
	// Daemons are left out of the process list (they name their dir
	// in their own command line) while they run.
	Daemons []*Daemon
	// Global adds all of /run/netns, /var/lib/cni/networks and every
	// veth of the host netns: only for a test that has the host to
	// itself.
	Global bool
}

// Scope is the scope of everything this daemon makes on its own: its
// temp dir (state, root, socket) and the daemon itself.
func (d *Daemon) Scope() HostScope {
	return HostScope{Dirs: []string{d.Dir}, Daemons: []*Daemon{d}}
}

// Scope adds the pods' cgroup parent and the CNI network (bridge, lease
// dir) to the daemon's scope.
func (e *PodEnv) Scope() HostScope {
	s := e.D.Scope()
	s.CgroupParents = []string{e.Parent}
	if e.Net != nil {
		s.LeaseDirs = []string{e.Net.DataDir}
		s.Bridges = []string{e.Net.Bridge}
		s.Networks = []string{e.Net.Name}
		s.Subnets = []*net.IPNet{e.Net.Subnet}
	}
	return s
}

// HostState is what a test has on the host at one moment: netns pins, IP
// leases, mounts, cgroups, veths, NAT rules, processes and files, each
// one a line such as "mount /tmp/berth-1/state/netns/<id>".
//
// A leak check is two calls:
//
//	before := framework.SnapshotHost(t, env.Scope())
//	... run pods, crash and restart berth, remove everything ...
//	framework.CheckHost(t, before)
//
// CheckHost fails the test naming every item that appeared or vanished.
type HostState struct {
	Scope HostScope
	Items []string // sorted
	// Notes say more of an item than its name: a process is named by
	// its pid and start time (its command line changes when it execs, as
	// a container's init does), the note is its command line.
	Notes map[string]string
}

// SnapshotHost lists what scope names on the host. It reads /proc and
// /sys and walks the scope's dirs, so it takes tens of milliseconds.
//
// Below the dirs every file is listed, and every directory named by an
// object id (other directories are made once and kept), but nothing
// inside unpacked image layers and containers' writable layers (only
// their top directory) and nothing below a mount point (the mount is
// listed instead): a leaked record, netns pin, exit file or ".tmp-" file
// shows as a path. Cgroups are listed below each parent, not the parent
// itself, which the test owns.
func SnapshotHost(t testing.TB, scope HostScope) HostState {
	t.Helper()
	var items []string
	notes := map[string]string{}
	add := func(kind, what string) { items = append(items, kind+" "+what) }

	mounts := readMounts()
	for _, m := range mounts {
		if scope.Global && strings.HasPrefix(m, "/run/netns/") || underAny(m, scope.Dirs) {
			add("mount", m)
		}
	}
	for _, dir := range scope.Dirs {
		walkFiles(dir, mounts, func(p string) { add("file", p) })
	}
	for _, dir := range append(scope.LeaseDirs, "/var/lib/cni/networks") {
		for _, n := range scope.Networks {
			listDir(filepath.Join(dir, n), func(p string) { add("lease", p) })
		}
	}
	if scope.Global {
		listDir("/run/netns", func(p string) { add("netns", p) })
		if nets, err := os.ReadDir("/var/lib/cni/networks"); err == nil {
			for _, n := range nets {
				if !slices.Contains(scope.Networks, n.Name()) {
					listDir(filepath.Join("/var/lib/cni/networks", n.Name()), func(p string) { add("lease", p) })
				}
			}
		}
	}
	for _, cg := range CgroupDirs(scope.CgroupParents) {
		add("cgroup", cg)
	}
	for _, v := range veths(scope) {
		add("veth", v)
	}
	if scope.NAT {
		for _, r := range natRules(scope.Networks) {
			add("iptables", r)
		}
		for _, subnet := range scope.Subnets {
			for _, r := range cnitest.FirewallRules(subnet) {
				add("iptables", r)
			}
		}
	}
	for id, cmd := range scopeProcs(scope) {
		add("process", id)
		notes["process "+id] = cmd
	}
	slices.Sort(items)
	return HostState{Scope: scope, Items: slices.Compact(items), Notes: notes}
}

// Diff lists what after has that h has not ("leaked: ...") and what h had
// that after lost ("gone: ..."); none when both are equal.
func (h HostState) Diff(after HostState) []string {
	var out []string
	for _, it := range after.Items {
		if _, found := slices.BinarySearch(h.Items, it); !found {
			out = append(out, "leaked: "+it+note(after.Notes[it]))
		}
	}
	for _, it := range h.Items {
		if _, found := slices.BinarySearch(after.Items, it); !found {
			out = append(out, "gone: "+it+note(h.Notes[it]))
		}
	}
	return out
}

func note(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// CheckHost snapshots the host again with before's scope and fails the
// test on any difference, naming each item. A process or mount may take a
// moment to go after the call that removed it returned, so a difference
// must last for a while (generously, the host is shared) to count.
func CheckHost(t testing.TB, before HostState) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		diff := before.Diff(SnapshotHost(t, before.Scope))
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("host state differs from before (%d items):\n\t%s", len(diff), strings.Join(diff, "\n\t"))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
