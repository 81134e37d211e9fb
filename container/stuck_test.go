package container

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/internal/fsguard"
)

// TestUnmountBelow: mounts below a container's dirs, nested ones too, are
// detached deepest first; a dir with none, or missing, is fine.
func TestUnmountBelow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	root := t.TempDir()
	upper, dir := filepath.Join(root, "upper"), filepath.Join(root, "dir")
	outer := filepath.Join(upper, "upper", "mnt")
	inner := filepath.Join(outer, "inner")
	os.MkdirAll(outer, 0o755)
	os.MkdirAll(dir, 0o755)
	for _, m := range []string{outer, inner} {
		os.MkdirAll(m, 0o755)
		if err := unix.Mount("tmpfs", m, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(m, unix.MNT_DETACH)
	}
	s := &Service{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.fs = fsguard.New(s.log, 0)
	if err := s.unmountBelow(context.Background(), dir, upper, filepath.Join(root, "missing")); err != nil {
		t.Fatal(err)
	}
	if mounts, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(root)); len(mounts) != 0 {
		t.Errorf("still mounted below %s: %v", root, mounts[0].Mountpoint)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Errorf("remove after the unmounts: %v", err)
	}
}
