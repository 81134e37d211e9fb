package image

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/moby/sys/mountinfo"
)

// FsUsage is what the store occupies on the filesystem that holds it.
type FsUsage struct {
	Timestamp  time.Time
	Mountpoint string
	UsedBytes  uint64
	InodesUsed uint64
}

// FsInfo reports the store's usage from the figures measured when each
// layer was unpacked, without walking the disk.
func (s *Service) FsInfo() FsUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := FsUsage{Timestamp: time.Now(), Mountpoint: s.mountpoint}
	for _, l := range s.layers {
		u.UsedBytes += uint64(l.Usage)
		u.InodesUsed += uint64(l.Inodes)
	}
	for _, img := range s.images {
		for _, size := range []int64{img.ManifestSize, img.IndexSize, img.ConfigSize} {
			if size > 0 {
				u.UsedBytes += uint64(roundBlock(size))
				u.InodesUsed++
			}
		}
	}
	return u
}

func roundBlock(n int64) int64 { return (n + 4095) &^ 4095 }

// mountpointOf finds the mount point of the filesystem holding dir: the
// deepest mount whose path contains it.
func mountpointOf(dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("find mount of %s: %w", dir, err)
	}
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(real))
	if err != nil {
		return "", fmt.Errorf("find mount of %s: %w", dir, err)
	}
	best := ""
	for _, m := range mounts {
		if len(m.Mountpoint) > len(best) {
			best = m.Mountpoint
		}
	}
	if best == "" {
		return "", fmt.Errorf("find mount of %s: no mount contains it", dir)
	}
	return best, nil
}
