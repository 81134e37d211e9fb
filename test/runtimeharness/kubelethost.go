package runtimeharness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berth-runtime/berth/test/kubehost"
)

// KubeletSysctls are the kernel settings the kubelet's container manager
// writes.
var KubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// KubeletHost is the machine-wide state a kubelet changes and never
// undoes, as it was before a run: the kernel settings, the iptables
// chains, the entries under host dirs the kubelet writes.
type KubeletHost struct {
	dirs    []string
	sysctls map[string]string
	chains  map[string]bool
	entries map[string]bool
}

// SnapshotKubeletHost records that state, with every path under dirs.
func SnapshotKubeletHost(dirs ...string) (*KubeletHost, error) {
	h := &KubeletHost{dirs: dirs, sysctls: map[string]string{}, chains: map[string]bool{}, entries: walk(dirs)}
	for _, k := range KubeletSysctls {
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

func walk(dirs []string) map[string]bool {
	m := map[string]bool{}
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				m[p] = true
			}
			return nil
		})
	}
	return m
}

// Restore writes back the kernel settings, deletes the chains and removes
// the entries made since the snapshot: what any kubelet leaves is not a
// leak, what cannot be undone is. A chain that cannot be deleted is passed
// to chainFailed (Leaks.Add to count it, or a log's Error).
func (h *KubeletHost) Restore(l *Leaks, chainFailed func(msg string, args ...any)) {
	for k, v := range h.sysctls {
		b, _ := os.ReadFile("/proc/sys/" + k)
		if strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			l.Add("sysctl not restored", "key", k, "value", v, "error", err)
		}
	}
	for _, c := range kubehost.KubeChains() {
		if h.chains[c] {
			continue
		}
		if err := kubehost.DeleteChain(c); err != nil {
			chainFailed("delete chain", "chain", c, "error", err)
		}
	}
	for _, p := range h.created() {
		if err := os.RemoveAll(p); err != nil {
			l.Add("could not remove", "path", p, "error", err)
		}
	}
}

// created lists the paths under the dirs made since the snapshot, deepest
// first.
func (h *KubeletHost) created() []string {
	var out []string
	for p := range walk(h.dirs) {
		if !h.entries[p] {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out
}
