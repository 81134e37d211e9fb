package framework

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcessesUnder returns every process whose command line names a path
// inside dir (a pod monitor names its socket under the state dir),
// together with all their descendants (pause, containers): the processes
// of one daemon's pods, nothing else's, since dir is a fresh temp dir of
// the test. The whole tree is collected before the caller signals
// anything, so a parent exiting when its child dies cannot hide the rest.
func ProcessesUnder(dir string) []int {
	procs := listProcs()
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	marker := []byte(dir + "/")
	var roots []int
	for _, p := range procs {
		if p.pid != os.Getpid() && bytes.Contains(p.cmdline, marker) {
			roots = append(roots, p.pid)
		}
	}
	seen := map[int]bool{}
	var tree []int
	var walk func(pid int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		tree = append(tree, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, pid := range roots {
		walk(pid)
	}
	return tree
}

// killProcessesUnder SIGKILLs ProcessesUnder(dir), waits a moment for them
// to go, and returns what it killed.
func killProcessesUnder(dir string) []string {
	tree := ProcessesUnder(dir)
	var killed []string
	for _, pid := range tree {
		cmd := cmdlineOf(pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed = append(killed, fmt.Sprintf("%d %s", pid, cmd))
		}
	}
	if len(killed) > 0 {
		// Give the kernel a moment to tear the processes down before the
		// temp dir and its mounts are removed.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			alive := false
			for _, pid := range tree {
				if Running(pid) {
					alive = true
				}
			}
			if !alive {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return killed
}

type proc struct {
	pid, ppid int
	cmdline   []byte
}

func listProcs() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, ok := parentOf(pid)
		if !ok {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, proc{pid: pid, ppid: ppid, cmdline: cmd})
	}
	return out
}

// statFields returns the fields of /proc/pid/stat after the command name,
// which may itself contain spaces and parentheses.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func parentOf(pid int) (int, bool) {
	f := statFields(pid)
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// ProcState is pid's state letter (Z for a zombie), false once it is
// gone (reaped).
func ProcState(pid int) (string, bool) {
	f := statFields(pid)
	if len(f) == 0 {
		return "", false
	}
	return f[0], true
}

// Running reports whether pid runs: a process that is gone or a zombie
// does not.
func Running(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && f[0] != "Z"
}

func cmdlineOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}
