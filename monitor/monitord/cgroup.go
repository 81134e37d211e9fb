package monitord

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
)

// joinOrder is the order the cgroupfs driver joins a process to its v1
// hierarchies (libcontainer's list); a hierarchy it does not know comes
// after them, by name. The unified hierarchy's key is "".
var joinOrder = []string{"cpuset", "devices", "memory", "cpu", "cpuacct", "pids", "blkio", "hugetlb", "net_cls", "net_prio", "perf_event", "freezer", "rdma", "misc", "name=systemd", ""}

// joinCgroup moves pause into the pod's cgroup. With cgroupfs berth has
// made every directory (PauseRequest.CgroupPaths): the pid is written into
// each, which is all that driver's join does, and keeps the cgroup library
// (and its D-Bus client) out of the monitor. With systemd the scope is
// started with pause as its process over D-Bus: the helper does that.
func (s *Server) joinCgroup(r *monitor.PauseRequest, pid int) error {
	if s.systemd {
		_, _, err := s.spawn(&monitor.SpawnRequest{Op: monitor.SpawnJoin, ID: s.pod, Pid: pid, Cgroup: r.Cgroup, CgroupPaths: r.CgroupPaths})
		return err
	}
	if len(r.CgroupPaths) == 0 {
		return fmt.Errorf("join cgroup %s: no directories prepared", r.Cgroup)
	}
	for _, k := range cgroupKeys(r.CgroupPaths) {
		if err := writeProcs(r.CgroupPaths[k], pid); err != nil {
			return fmt.Errorf("join cgroup %s: %w", r.Cgroup, err)
		}
	}
	return nil
}

func cgroupKeys(paths map[string]string) []string {
	keys := make([]string, 0, len(paths))
	for _, k := range joinOrder {
		if _, ok := paths[k]; ok {
			keys = append(keys, k)
		}
	}
	var rest []string
	for k := range paths {
		if !slices.Contains(joinOrder, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(keys, rest...)
}

// writeProcs writes pid into dir's cgroup.procs. EINVAL may mean the task
// is still being made (TASK_NEW): it is tried again.
func writeProcs(dir string, pid int) error {
	if dir == "" {
		return errors.New("no directory for a hierarchy")
	}
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := 0; ; i++ {
		_, err = f.WriteString(strconv.Itoa(pid))
		if !errors.Is(err, unix.EINVAL) || i == 4 {
			break
		}
		time.Sleep(30 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("write %d into %s: %w", pid, f.Name(), err)
	}
	return nil
}
