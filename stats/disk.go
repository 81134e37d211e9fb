package stats

import (
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
)

// diskUsage caches the size of directories (writable layers). A walk can
// take long for a big layer, so a call never waits for one: it gets the
// last result and, if that is older than the refresh interval, starts a
// walk in the background. Only a directory never measured is walked in
// the caller, once (a new container's layer is nearly empty).
type diskUsage struct {
	every time.Duration
	log   *slog.Logger
	walks chan struct{} // bounds concurrent background walks

	mu      sync.Mutex
	entries map[string]*duEntry
}

type duEntry struct {
	bytes, inodes uint64
	at            time.Time
	asked         time.Time
	walking       bool
}

func newDiskUsage(every time.Duration, log *slog.Logger) *diskUsage {
	return &diskUsage{every: every, log: log, walks: make(chan struct{}, 1), entries: map[string]*duEntry{}}
}

// get returns dir's usage and when it was measured.
func (d *diskUsage) get(dir string, now time.Time) (bytes, inodes uint64, at time.Time) {
	d.mu.Lock()
	e, ok := d.entries[dir]
	if !ok {
		d.mu.Unlock()
		b, n := walk(dir)
		at := time.Now()
		d.mu.Lock()
		if cur, ok := d.entries[dir]; ok {
			e = cur
		} else {
			e = &duEntry{bytes: b, inodes: n, at: at}
			d.entries[dir] = e
		}
	}
	e.asked = now
	if now.Sub(e.at) >= d.every && !e.walking {
		e.walking = true
		go d.refresh(dir, e)
	}
	bytes, inodes, at = e.bytes, e.inodes, e.at
	d.mu.Unlock()
	return bytes, inodes, at
}

func (d *diskUsage) refresh(dir string, e *duEntry) {
	d.walks <- struct{}{}
	start := time.Now()
	b, n := walk(dir)
	<-d.walks
	if took := time.Since(start); took > time.Second {
		d.log.Debug("slow writable layer walk", "dir", dir, "took", took, "bytes", b, "inodes", n)
	}
	d.mu.Lock()
	e.bytes, e.inodes, e.at, e.walking = b, n, time.Now(), false
	d.mu.Unlock()
}

// prune forgets directories nobody asked about recently.
func (d *diskUsage) prune(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, e := range d.entries {
		if !e.walking && now.Sub(e.asked) > forgetAfter {
			delete(d.entries, k)
		}
	}
}

// walk sums the space (allocated blocks, as du does) and the inodes used
// under dir, counting a hard-linked file once.
func walk(dir string) (bytes, inodes uint64) {
	seen := map[uint64]bool{}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished while walking, or unreadable: skip
		}
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
