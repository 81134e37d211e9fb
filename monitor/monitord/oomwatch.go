package monitord

import (
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// oomWatch follows a container's oom_kill counter (v2 memory.events) while
// it runs, for the systemd driver: systemd removes a scope's cgroup as soon
// as its last process is gone, often before the monitor has learnt of the
// exit, and the counter read then finds nothing (cri-o/cri-o#7035,
// runc#5071). The kernel notifies memory.events' watchers when the
// counter moves, which is before the killed process is gone, so the value
// read then is kept for the exit. Those notifications are rate-limited
// (one per 10 ms; a later one waits on a timer that a removed cgroup no
// longer fires), so the pod's parent, which systemd keeps and whose
// memory.events counts its children's kills too, is the last witness.
type oomWatch struct {
	fd    int
	kills atomic.Int64

	parentFile string
	parentBase int64 // the parent's oom_kill when the container started
}

// watchOOM starts the watch where it is needed: the systemd driver on a
// v2 host (the cgroupfs driver removes the cgroup itself, after the read).
// A watch that cannot be set leaves the exit's own read, as before.
func (c *ctr) watchOOM() {
	dir, ok := c.cgroups[""]
	if !c.srv.systemd || !ok {
		return
	}
	file := filepath.Join(dir, "memory.events")
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return
	}
	if _, err := unix.InotifyAddWatch(fd, file, unix.IN_MODIFY); err != nil {
		unix.Close(fd) // no memory controller, or no v2 (memory.oom_control)
		return
	}
	w := &oomWatch{fd: fd, parentFile: filepath.Join(filepath.Dir(dir), "memory.events")}
	w.parentBase, _ = counter(w.parentFile, "oom_kill")
	events := make([]byte, 4*(unix.SizeofInotifyEvent+unix.PathMax))
	err = c.srv.poll.watch(fd, func() {
		for {
			if n, err := unix.Read(fd, events); n <= 0 || err != nil {
				break
			}
		}
		if n, ok := counter(file, "oom_kill"); ok && n > w.kills.Load() {
			w.kills.Store(n)
		}
	})
	if err != nil {
		unix.Close(fd)
		return
	}
	c.oom = w
}

// oomSeen stops the watch and tells whether the container, which ended
// with exit, was OOM-killed by what the watch saw: a kill counted in its
// cgroup; or, where that cgroup is gone already and a SIGKILL ended the
// container, a kill counted in the pod's parent since the container
// started. The second may name the kill of a sibling container that
// happened while this one was SIGKILLed for another reason: rare, and
// its code (137) is the same. Safe on a container without a watch.
func (c *ctr) oomSeen(exitSignal int) bool {
	w := c.oom
	if w == nil {
		return false
	}
	c.oom = nil
	c.srv.poll.forget(w.fd)
	unix.Close(w.fd)
	if w.kills.Load() > 0 {
		return true
	}
	if _, ok := counter(filepath.Join(c.cgroups[""], "memory.events"), "oom_kill"); ok || exitSignal != int(unix.SIGKILL) {
		return false // the container's own count stands (read by oomKilled)
	}
	n, ok := counter(w.parentFile, "oom_kill")
	return ok && n > w.parentBase
}
