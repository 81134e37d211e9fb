package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// stuckProcesses says what of a container is left after a SIGKILL: each
// process of its cgroup with its state and the kernel function it waits
// in (D, uninterruptible sleep, in fuse_* or request_wait_answer is a
// filesystem that does not answer).
func (s *Service) stuckProcesses(c *ctr) string {
	cg := c.cgroupPath(s.opts.CgroupDriver)
	var pids []int
	if cg != "" {
		pids = cgroupProcs(cg)
	}
	if len(pids) == 0 {
		if pid := c.snapshot().Pid; pid > 0 {
			pids = []int{pid}
		}
	}
	if len(pids) == 0 {
		return "no process found"
	}
	const most = 8
	var parts []string
	for i, pid := range pids {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(pids)-most))
			break
		}
		parts = append(parts, describeProcess(pid))
	}
	return fmt.Sprintf("%d processes left: %s", len(pids), strings.Join(parts, ", "))
}

// cgroupProcs lists the processes of the cgroup at path (relative to the
// hierarchies' root) in the first hierarchy that has it: pids, memory or
// cpu on cgroup v1, the unified one on v2.
func cgroupProcs(path string) []int {
	for _, h := range []string{"pids", "memory", "cpu,cpuacct", "unified", ""} {
		data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", h, path, "cgroup.procs"))
		if err != nil {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		slices.Sort(pids)
		return pids
	}
	return nil
}

// describeProcess is "pid (comm) state in wchan", from /proc.
func describeProcess(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return fmt.Sprintf("%d (gone)", pid)
	}
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+3 > len(s) {
		return strconv.Itoa(pid)
	}
	comm, state := s[open+1:end], s[end+2:end+3]
	out := fmt.Sprintf("%d (%s) %s", pid, comm, state)
	if state == "D" {
		out += " (uninterruptible sleep)"
	}
	if w, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); err == nil && len(w) > 0 && string(w) != "0" {
		out += " in " + string(w)
	}
	return out
}

// unmountBelow detaches every mount at or below dirs, deepest first, each
// under the guard (the path lookup of a mount on a mount that does not
// answer could block).
func (s *Service) unmountBelow(ctx context.Context, dirs ...string) error {
	seen := map[string]bool{}
	var points []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(d))
		if err != nil {
			return fmt.Errorf("list mounts below %s: %w", d, err)
		}
		for _, m := range mounts {
			if !seen[m.Mountpoint] {
				seen[m.Mountpoint] = true
				points = append(points, m.Mountpoint)
			}
		}
	}
	// Deepest first: a mount's parent cannot go before it.
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range points {
		err := s.fs.Do(ctx, "unmount", p, func(func(string)) error { return unix.Unmount(p, unix.MNT_DETACH) })
		switch {
		case err == nil:
			s.log.Info("detached a mount below a removed container's dirs", "mount", p)
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		default:
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}
