// Package procstate names and describes processes from /proc: a process by
// its pid and start time (StartTime), killed and waited for through a
// pidfd (Kill), and those that do not end when killed: their
// state and the kernel function they wait in, from /proc. A process in D
// (uninterruptible sleep) in a FUSE request waits for a filesystem that
// does not answer; the init of a PID namespace in zap_pid_ns_processes
// waits for such a member.
package procstate

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Describe is "pid (comm) state, waiting in wchan", e.g. "812 (ls) D
// (uninterruptible sleep) in request_wait_answer".
func Describe(pid int) string {
	comm, state, ok := stat(pid)
	if !ok {
		return fmt.Sprintf("%d (gone)", pid)
	}
	out := fmt.Sprintf("%d (%s) %s", pid, comm, state)
	switch state {
	case "D":
		out += " (uninterruptible sleep)"
	case "Z":
		out += " (zombie)"
	}
	if w, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); err == nil && len(w) > 0 && string(w) != "0" {
		out += " in " + string(w)
	}
	return out
}

// Alive reports whether pid is a process that has not been reaped.
func Alive(pid int) bool {
	_, _, ok := stat(pid)
	return ok
}

// DescribeAll describes up to most of pids, then says how many more.
func DescribeAll(pids []int, most int) string {
	var parts []string
	for i, pid := range pids {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(pids)-most))
			break
		}
		parts = append(parts, Describe(pid))
	}
	return strings.Join(parts, ", ")
}

// SamePIDNamespace lists the other processes in the PID namespace that pid
// is the init of (or a member of), from the host's /proc.
func SamePIDNamespace(pid int) []int {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, p)
		}
	}
	return out
}

// stat reads the command name and state of pid.
func stat(pid int) (comm, state string, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", "", false
	}
	s := string(data)
	// The command name may hold spaces and parentheses.
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+3 > len(s) {
		return "", "", false
	}
	return s[open+1 : end], s[end+2 : end+3], true
}
