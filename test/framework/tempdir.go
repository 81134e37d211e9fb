package framework

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// TempDir makes a directory under /tmp, short enough for unix socket paths
// (108 bytes at most), removed when the test ends after lazily unmounting
// whatever is still mounted under it (netns pins, rootfs mounts).
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "berth-")
	if err != nil {
		t.Fatal(err)
	}
	// Searchable by others (not readable): a container in a pod's user
	// namespace reaches its rootfs by path as nobody to the host, so a
	// daemon's state dir must be, as /run/berth is.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := UnmountUnder(dir); err != nil {
			t.Errorf("unmount under %s: %v", dir, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

// UnmountUnder lazily unmounts every mount at or below dir, deepest first.
func UnmountUnder(dir string) error {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	slices.SortFunc(mounts, func(a, b *mountinfo.Info) int {
		return cmp.Compare(len(b.Mountpoint), len(a.Mountpoint))
	})
	var firstErr error
	for _, m := range mounts {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT && firstErr == nil {
			firstErr = &os.PathError{Op: "unmount", Path: m.Mountpoint, Err: err}
		}
	}
	return firstErr
}
