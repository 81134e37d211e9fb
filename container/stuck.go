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

	"github.com/berth-runtime/berth/internal/procstate"
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
	desc := procstate.DescribeAll(pids, 8)
	if !slices.ContainsFunc(pids, procstate.Alive) {
		// Gone by now: the exit is under way in the monitor (it removes
		// the cgroup and drains the output before it reports).
		return fmt.Sprintf("its processes have just exited (%s), the pod's monitor has not reported the exit yet", desc)
	}
	return fmt.Sprintf("%d processes left: %s", len(pids), desc)
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
