package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestApplyTar(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	setuid := file("bin/su", "su")
	setuid.mode = 0o4755
	owned := file("home/u/f", "mine")
	owned.uid, owned.gid, owned.mode = 1000, 1001, 0o600
	withXattr := file("etc/x", "x")
	withXattr.xattrs = map[string]string{"user.berth": "yes", "trusted.overlay.redirect": "/evil"}
	dev := entry{name: "dev/null", typ: tar.TypeChar, major: 1, minor: 3, mode: 0o666}
	fifo := entry{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600}
	privDir := dir("private")
	privDir.mode = 0o700

	err := applyTar(context.Background(), quiet, bytes.NewReader(tarBytes(t,
		dir("./"),
		dir("bin"), setuid,
		file("bin/busybox", "bb"), hardlink("bin/sh", "bin/busybox"),
		symlink("bin/ls", "/bin/busybox"),
		owned, withXattr, dev, fifo, privDir,
		file("deep/er/no/parents", "p"),
		file("replaced", "old"), dir("replaced"), file("replaced/child", "c"),
		dir("opaque"), file("opaque/.wh..wh..opq", ""), file("opaque/new", "n"),
		file("gone/.wh.old", ""),
		file(".wh..wh.plnk", ""),
	)), root)
	if err != nil {
		t.Fatal(err)
	}

	stat := func(p string) unix.Stat_t {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, p), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := stat("bin/su"); st.Mode&0o7777 != 0o4755 {
		t.Errorf("setuid mode = %o", st.Mode&0o7777)
	}
	if a, b := stat("bin/busybox"), stat("bin/sh"); a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link: inodes %d %d nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	if target, _ := os.Readlink(filepath.Join(root, "bin/ls")); target != "/bin/busybox" {
		t.Errorf("symlink target %q", target)
	}
	if st := stat("home/u/f"); st.Uid != 1000 || st.Gid != 1001 || st.Mode&0o777 != 0o600 {
		t.Errorf("owned file: uid %d gid %d mode %o", st.Uid, st.Gid, st.Mode&0o777)
	}
	if st := stat("home/u/f"); st.Mtim.Sec != epoch.Unix() {
		t.Errorf("mtime %d, want %d", st.Mtim.Sec, epoch.Unix())
	}
	if st := stat("bin"); st.Mtim.Sec != epoch.Unix() {
		t.Errorf("dir mtime %d, want %d (children must not change it)", st.Mtim.Sec, epoch.Unix())
	}
	if st := stat("private"); st.Mode&0o777 != 0o700 {
		t.Errorf("private dir mode %o", st.Mode&0o777)
	}
	if v := xattr(t, filepath.Join(root, "etc/x"), "user.berth"); v != "yes" {
		t.Errorf("user xattr = %q", v)
	}
	if v := xattr(t, filepath.Join(root, "etc/x"), "trusted.overlay.redirect"); v != "" {
		t.Errorf("overlay xattr from the layer was applied: %q", v)
	}
	if st := stat("dev/null"); st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
		t.Errorf("device: mode %o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if st := stat("run/fifo"); st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("fifo mode %o", st.Mode)
	}
	if st := stat("deep/er/no"); st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o777 != 0o755 {
		t.Errorf("implicit parent mode %o", st.Mode)
	}
	if st := stat("replaced"); st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("replaced is not a directory")
	}
	if v := xattr(t, filepath.Join(root, "opaque"), "trusted.overlay.opaque"); v != "y" {
		t.Errorf("opaque xattr = %q", v)
	}
	if _, err := os.Lstat(filepath.Join(root, "opaque/.wh..wh..opq")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("opaque marker written as a file: %v", err)
	}
	if st := stat("gone/old"); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("whiteout: mode %o rdev %d", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(root, ".wh..wh.plnk")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("aufs metadata written: %v", err)
	}
}

func xattr(t *testing.T, p, name string) string {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if errors.Is(err, unix.ENODATA) {
		return ""
	}
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", p, name, err)
	}
	return string(buf[:n])
}

func TestApplyTarRefusesEscapes(t *testing.T) {
	needRoot(t)
	tests := []struct {
		name    string
		entries []entry
	}{
		{"dot dot", []entry{file("../evil", "x")}},
		{"dot dot inside", []entry{file("a/../../evil", "x")}},
		{"absolute", []entry{file("/evil", "x")}},
		{"absolute symlink parent", []entry{symlink("link", "OUTSIDE"), file("link/evil", "x")}},
		{"relative symlink parent", []entry{dir("a"), symlink("a/up", "../.."), file("a/up/evil", "x")}},
		{"symlink chain", []entry{symlink("l1", "l2"), symlink("l2", "../"), file("l1/evil", "x")}},
		{"hard link out", []entry{hardlink("stolen", "../victim")}},
		{"hard link absolute", []entry{hardlink("stolen", "/victim")}},
		{"hard link through symlink", []entry{symlink("link", "OUTSIDE"), hardlink("stolen", "link/victim")}},
		{"whiteout through symlink", []entry{symlink("link", "OUTSIDE"), file("link/.wh.victim", "")}},
		{"opaque through symlink", []entry{symlink("link", "OUTSIDE"), file("link/.wh..wh..opq", "")}},
		{"dir through symlink", []entry{symlink("link", "OUTSIDE"), dir("link/sub")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "layer", "root")
			outside := filepath.Join(base, "outside")
			for _, d := range []string{root, outside} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("v"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(base, "layer", "victim"), []byte("v"), 0o644); err != nil {
				t.Fatal(err)
			}
			entries := make([]entry, len(tt.entries))
			for i, e := range tt.entries {
				if e.link == "OUTSIDE" {
					e.link = outside
				}
				entries[i] = e
			}
			err := applyTar(context.Background(), quiet, bytes.NewReader(tarBytes(t, entries...)), root)
			if err == nil {
				t.Fatal("hostile layer applied without error")
			}
			if !errors.Is(err, errEscape) {
				t.Errorf("refused, but not as an escape: %v", err)
			}
			for _, dir := range []string{outside, filepath.Join(base, "layer"), base} {
				names, _ := os.ReadDir(dir)
				for _, n := range names {
					switch n.Name() {
					case "victim", "outside", "layer", "root":
						continue
					}
					t.Errorf("written outside the layer: %s/%s", dir, n.Name())
				}
			}
			if st, err := os.Stat(filepath.Join(outside, "victim")); err != nil || st.Size() != 1 {
				t.Errorf("victim changed: %v", err)
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(outside, "victim"), &st); err == nil && st.Nlink != 1 {
				t.Errorf("victim gained a hard link")
			}
		})
	}
}
