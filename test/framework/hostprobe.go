package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// What SnapshotHost reads of the host, one kind of item each.

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// readMounts returns the mount points of this mount namespace.
func readMounts() []string {
	mounts, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	return out
}

// opaqueDirs are directories whose children are listed but not entered:
// unpacked layers and containers' upper dirs hold whole file trees that
// come and go with their top directory.
var opaqueDirs = []string{"/root/layers", "/root/containers"}

func walkFiles(dir string, mounts []string, add func(string)) {
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		if !e.IsDir() {
			if !bookkeeping(e.Name()) {
				add(p)
			}
			return nil
		}
		if isObjectID(e.Name()) {
			add(p)
		}
		if slices.Contains(mounts, p) {
			return fs.SkipDir
		}
		for _, o := range opaqueDirs {
			if strings.HasSuffix(filepath.Dir(p), o) {
				return fs.SkipDir
			}
		}
		return nil
	})
}

func listDir(dir string, add func(string)) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !bookkeeping(e.Name()) {
			add(filepath.Join(dir, e.Name()))
		}
	}
}

// bookkeeping files stay once the first pod made them: host-local's lock
// and its cursor of the last IP handed out.
func bookkeeping(name string) bool {
	return name == "lock" || strings.HasPrefix(name, "last_reserved_ip.")
}

// isObjectID reports whether a directory is named by a pod, container or
// layer id (64 hex digits): such a directory belongs to one object and
// goes with it, where other directories are made once and kept.
func isObjectID(name string) bool {
	if len(name) < 32 {
		return false
	}
	for _, c := range name {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// veths lists the ports of the scope's bridges and, with Global, every
// interface of the host netns whose peer is elsewhere (iflink differs
// from ifindex, as for a veth whose other end is in a pod).
func veths(scope HostScope) []string {
	var out []string
	for _, br := range scope.Bridges {
		ports, _ := os.ReadDir(filepath.Join("/sys/class/net", br, "brif"))
		for _, p := range ports {
			out = append(out, br+"/"+p.Name())
		}
	}
	if scope.Global {
		links, _ := os.ReadDir("/sys/class/net")
		for _, l := range links {
			dir := filepath.Join("/sys/class/net", l.Name())
			idx, _ := os.ReadFile(filepath.Join(dir, "ifindex"))
			peer, _ := os.ReadFile(filepath.Join(dir, "iflink"))
			if len(idx) > 0 && !bytes.Equal(idx, peer) {
				out = append(out, l.Name())
			}
		}
	}
	return out
}

// scopeProcs maps "<pid>@<start time>" to the command line of the
// processes that name a dir of
// the scope in their command line or working directory or run in one of
// its cgroups, and all their descendants; running daemons of the scope
// are left out (but not their children).
func scopeProcs(scope HostScope) map[string]string {
	skip := map[int]bool{os.Getpid(): true}
	for _, d := range scope.Daemons {
		if d.Running() {
			skip[d.PID] = true
		}
	}
	procs := listProcs()
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	matched := map[int]bool{}
	var mark func(pid int)
	mark = func(pid int) {
		if matched[pid] || skip[pid] {
			return
		}
		matched[pid] = true
		for _, c := range children[pid] {
			mark(c)
		}
	}
	for _, p := range procs {
		if !skip[p.pid] && procInScope(p, scope) {
			mark(p.pid)
		}
	}
	out := map[string]string{}
	for _, p := range procs {
		if f := statFields(p.pid); matched[p.pid] && len(f) > 19 && f[0] != "Z" {
			// Field 22 of stat, the 20th after the command name.
			out[fmt.Sprintf("%d@%s", p.pid, f[19])] = cmdlineOf(p.pid)
		}
	}
	return out
}

// natRules lists the rules of the nat table that name one of networks;
// none without iptables-save (a host without it has no such rules).
func natRules(networks []string) []string {
	if len(networks) == 0 {
		return nil
	}
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		return nil
	}
	var rules []string
	for line := range strings.Lines(string(out)) {
		for _, n := range networks {
			if strings.HasPrefix(line, "-A ") && strings.Contains(line, n) {
				rules = append(rules, strings.TrimSpace(line))
				break
			}
		}
	}
	return rules
}

func procInScope(p proc, scope HostScope) bool {
	for _, d := range scope.Dirs {
		if bytes.Contains(p.cmdline, []byte(d+"/")) {
			return true
		}
	}
	if cwd, err := os.Readlink("/proc/" + strconv.Itoa(p.pid) + "/cwd"); err == nil && underAny(cwd, scope.Dirs) {
		return true
	}
	if len(scope.CgroupParents) == 0 {
		return false
	}
	f, err := os.Open("/proc/" + strconv.Itoa(p.pid) + "/cgroup")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// hierarchy-id:controllers:path
		_, path, _ := strings.Cut(s.Text(), ":")
		_, path, _ = strings.Cut(path, ":")
		for _, parent := range scope.CgroupParents {
			if path == parent || strings.HasPrefix(path, parent+"/") {
				return true
			}
		}
	}
	return false
}
