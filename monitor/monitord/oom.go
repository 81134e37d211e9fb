package monitord

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// oomKilled tells whether the kernel's OOM killer killed a process of the
// container's memory cgroup: the oom_kill counter of memory.oom_control
// (v1) or memory.events (v2). The cgroup is the container's own, so any
// kill counted there is one of its processes.
func oomKilled(cgroups map[string]string) bool {
	if p, ok := cgroups["memory"]; ok {
		if n, ok := counter(filepath.Join(p, "memory.oom_control"), "oom_kill"); ok {
			return n > 0
		}
	}
	if p, ok := cgroups[""]; ok {
		if n, ok := counter(filepath.Join(p, "memory.events"), "oom_kill"); ok {
			return n > 0
		}
	}
	return false
}

func counter(file, key string) (int64, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
