package stats

import (
	"context"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/berth-runtime/berth/internal/fsguard"
)

// diskUsage caches the size of directories (writable layers). A walk can
// take long for a big layer, so a call never waits for one: it gets the
// last result and, if that is older than the refresh interval, starts a
// walk in the background. Only a directory never measured is waited for,
// firstWait at most (a new container's layer is nearly empty): a walk
// stuck in a filesystem that does not answer makes that caller fail
// naming where it is stuck, never the calls about other containers.
type diskUsage struct {
	every time.Duration
	log   *slog.Logger
	walks chan struct{} // bounds concurrent background walks
	// stuckAfter is how long a background walk keeps its place among
	// walks; past it, it is logged as blocked and others may go.
	stuckAfter time.Duration
	walk       func(dir string, at func(string)) (bytes, inodes uint64) // walk, or a test's

	mu      sync.Mutex
	entries map[string]*duEntry
}

type duEntry struct {
	bytes, inodes uint64
	at            time.Time // zero until measured
	asked         time.Time
	walk          *duWalk // the walk under way, nil if none
}

type duWalk struct {
	done  chan struct{}
	start time.Time
	cur   atomic.Pointer[string] // the path being looked at
	late  atomic.Bool            // logged as blocked
}

// firstWait bounds how long a caller waits for a layer's first walk.
const firstWait = time.Second

func newDiskUsage(every time.Duration, log *slog.Logger) *diskUsage {
	if log == nil {
		log = slog.Default()
	}
	return &diskUsage{every: every, log: log, walks: make(chan struct{}, 1), stuckAfter: 30 * time.Second, walk: walk, entries: map[string]*duEntry{}}
}

// get returns dir's usage and when it was measured; an error, naming the
// path the walk is stuck at, only for a directory never measured whose
// first walk has not ended within firstWait (or ctx's budget).
func (d *diskUsage) get(ctx context.Context, dir string, now time.Time) (bytes, inodes uint64, at time.Time, err error) {
	d.mu.Lock()
	e, ok := d.entries[dir]
	if !ok {
		e = &duEntry{}
		d.entries[dir] = e
	}
	e.asked = now
	if e.walk == nil && (e.at.IsZero() || now.Sub(e.at) >= d.every) {
		e.walk = &duWalk{done: make(chan struct{}), start: time.Now()}
		go d.run(dir, e, e.walk, e.at.IsZero())
	}
	if !e.at.IsZero() {
		bytes, inodes, at = e.bytes, e.inodes, e.at
		d.mu.Unlock()
		return bytes, inodes, at, nil
	}
	w := e.walk
	d.mu.Unlock()
	wait := firstWait - time.Since(w.start)
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-100*time.Millisecond)
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-w.done:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	d.mu.Lock()
	bytes, inodes, at = e.bytes, e.inodes, e.at
	d.mu.Unlock()
	if !at.IsZero() {
		return bytes, inodes, at, nil
	}
	cur := dir
	if p := w.cur.Load(); p != nil {
		cur = *p
	}
	return 0, 0, at, &fsguard.Error{Op: "measure writable layer", Path: dir, At: cur,
		Blocked: time.Since(w.start).Round(time.Millisecond), Err: fsguard.ErrBlocked}
}

// run walks dir for e. A first walk does not queue behind other layers'
// walks. A walk that never returns keeps e.walk set (no second walk of
// the same dir piles up behind it) but gives up its place among walks.
func (d *diskUsage) run(dir string, e *duEntry, w *duWalk, first bool) {
	if !first {
		d.walks <- struct{}{}
		defer func() { <-d.walks }()
	}
	go func() {
		b, n := d.walk(dir, func(p string) { w.cur.Store(&p) })
		took := time.Since(w.start)
		d.mu.Lock()
		e.bytes, e.inodes, e.at, e.walk = b, n, time.Now(), nil
		d.mu.Unlock()
		close(w.done)
		switch {
		case w.late.Load():
			d.log.Warn("blocked writable layer walk returned", "dir", dir, "took", took)
		case took > time.Second:
			d.log.Debug("slow writable layer walk", "dir", dir, "took", took, "bytes", b, "inodes", n)
		}
	}()
	t := time.NewTimer(d.stuckAfter)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		w.late.Store(true)
		cur := dir
		if p := w.cur.Load(); p != nil {
			cur = *p
		}
		d.log.Warn("writable layer walk blocked, left running", "dir", dir, "at", cur, "blocked", time.Since(w.start).Round(time.Millisecond))
	}
}

// prune forgets directories nobody asked about recently.
func (d *diskUsage) prune(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, e := range d.entries {
		if e.walk == nil && now.Sub(e.asked) > forgetAfter {
			delete(d.entries, k)
		}
	}
}

// walk sums the space (allocated blocks, as du does) and the inodes used
// under dir, counting a hard-linked file once. It stays on dir's
// filesystem, as du -x: what is mounted below (by hand, or a mount left
// behind) is not the layer's, and may be a filesystem that never answers.
// at is told each path before it is looked at.
func walk(dir string, at func(string)) (bytes, inodes uint64) {
	skip := map[string]bool{}
	if mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir)); err == nil {
		for _, m := range mounts {
			if m.Mountpoint != dir {
				skip[m.Mountpoint] = true
			}
		}
	}
	seen := map[uint64]bool{}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished while walking, or unreadable: skip
		}
		if skip[p] {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		at(p)
		info, err := e.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !info.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		inodes++
		bytes += uint64(st.Blocks) * 512
		return nil
	})
	return bytes, inodes
}

// mountpointOf is the mount point of the filesystem holding p, the id
// the kubelet matches filesystems by.
func mountpointOf(p string) string {
	// ParentsFilter compares strings: /data is a "parent" of /data2.
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(p))
	if err != nil {
		return "/"
	}
	best := "/"
	for _, m := range mounts {
		mp := m.Mountpoint
		within := p == mp || mp == "/" || strings.HasPrefix(p, mp+"/")
		if within && len(mp) > len(best) {
			best = m.Mountpoint
		}
	}
	return best
}
