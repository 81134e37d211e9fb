package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// proc is one process as /proc shows it. A pid with its start time names a
// process uniquely (pids are reused).
type proc struct {
	pid, ppid int
	start     uint64
	comm      string
}

type procKey struct {
	pid   int
	start uint64
}

func (p proc) key() procKey { return procKey{p.pid, p.start} }

// readProc reads /proc/<pid>/stat; the command name may hold spaces and
// parentheses, so fields count from its last ')'.
func readProc(pid int) (proc, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, err
	}
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 20 {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return proc{pid: pid, ppid: ppid, start: start, comm: string(data[open+1 : end])}, nil
}

// allProcs lists every process; ones that exit while being read are skipped.
func allProcs() map[int]proc {
	out := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := readProc(pid); err == nil {
			out[pid] = p
		}
	}
	return out
}

func procSet(ps map[int]proc) map[procKey]bool {
	out := make(map[procKey]bool, len(ps))
	for _, p := range ps {
		out[p.key()] = true
	}
	return out
}

// descendsFrom reports whether pid is one of roots or below one of them.
func descendsFrom(ps map[int]proc, pid int, roots map[int]bool) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if roots[pid] {
			return true
		}
		p, ok := ps[pid]
		if !ok {
			return false
		}
		pid = p.ppid
	}
	return false
}

func cmdline(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

func cgroupLines(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return string(data)
}

// memKB reads Rss and Pss (kB) from /proc/<pid>/smaps_rollup.
func memKB(pid int) (rss, pss uint64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "Rss":
			rss = n
		case "Pss":
			pss = n
		}
	}
	return rss, pss, sc.Err()
}

// vmRSSKB is the process's resident set from /proc/<pid>/status.
func vmRSSKB(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// socketOwner finds the process that listens on a unix socket path: the
// socket's inode from /proc/net/unix, then the process holding an fd on it.
func socketOwner(path string) (int, error) {
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		// Num RefCount Protocol Flags Type St Inode Path; St 01 = listening.
		if len(f) >= 8 && f[7] == path && f[5] == "01" {
			inodes["socket:["+f[6]+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on %s", path)
	}
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name())); err == nil && inodes[l] {
				pids = append(pids, pid)
				break
			}
		}
	}
	if len(pids) == 0 {
		return 0, errors.New("no process holds the socket " + path)
	}
	// A listener inherited by children: the daemon is the holder whose
	// parent holds none.
	sort.Ints(pids)
	holders := map[int]bool{}
	for _, pid := range pids {
		holders[pid] = true
	}
	for _, pid := range pids {
		if p, err := readProc(pid); err == nil && !holders[p.ppid] {
			return pid, nil
		}
	}
	return pids[0], nil
}
