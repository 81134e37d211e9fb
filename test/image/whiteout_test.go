package image_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/test/framework"
)

// The layers of berth-test/whiteout, mounted with overlayfs as a container
// would see them, give the merged tree test/images/mkimage documents.
func TestWhiteoutMergedTree(t *testing.T) {
	reg := registry(t)
	d := framework.StartDaemon(t)
	ref := reg + "/berth-test/whiteout:latest"
	pull(t, d, ref)
	info := verbose(t, d, ref)
	var lower []string
	for i := len(info.Layers) - 1; i >= 0; i-- {
		lower = append(lower, info.Layers[i].Dir)
	}
	merged := t.TempDir()
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lower, ":")); err != nil {
		t.Fatalf("mount overlay: %v", err)
	}
	defer func() {
		if err := unix.Unmount(merged, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	root := func(p string) string { return filepath.Join(merged, p) }

	type want struct {
		mode     uint32 // type and permission bits
		uid, gid uint32
		content  string
		link     string
	}
	const file, dir, link = unix.S_IFREG, unix.S_IFDIR, unix.S_IFLNK
	tree := map[string]want{
		"wh":                    {mode: dir | 0o755},
		"wh/keep.txt":           {mode: file | 0o644, content: "keep\n"},
		"wh/opaque":             {mode: dir | 0o755},
		"wh/opaque/new.txt":     {mode: file | 0o644, content: "new\n"},
		"wh/recreated.txt":      {mode: file | 0o644, content: "version 3\n"},
		"wh/links/orig.txt":     {mode: file | 0o644, content: "hard\n"},
		"wh/links/hard.txt":     {mode: file | 0o644, content: "hard\n"},
		"wh/links/rel-symlink":  {mode: link | 0o777, link: "orig.txt"},
		"wh/links/abs-symlink":  {mode: link | 0o777, link: "/wh/keep.txt"},
		"wh/setuid":             {mode: file | 0o4755, content: "#!/bin/sh\necho setuid\n"},
		"wh/private":            {mode: dir | 0o700, uid: 1000, gid: 1000},
		"wh/private/secret.txt": {mode: file | 0o600, uid: 1000, gid: 1000, content: "secret\n"},
		"wh/owned.txt":          {mode: file | 0o640, uid: 1000, gid: 1000, content: "owned\n"},
		"wh/layer3-hard.txt":    {mode: file | 0o640, uid: 1000, gid: 1000, content: "owned\n"},
	}
	for p, w := range tree {
		var st unix.Stat_t
		if err := unix.Lstat(root(p), &st); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if st.Mode != w.mode || st.Uid != w.uid || st.Gid != w.gid {
			t.Errorf("%s: mode %o %d:%d, want %o %d:%d", p, st.Mode, st.Uid, st.Gid, w.mode, w.uid, w.gid)
		}
		if w.content != "" {
			if b, err := os.ReadFile(root(p)); err != nil || string(b) != w.content {
				t.Errorf("%s: content %q, %v; want %q", p, b, err, w.content)
			}
		}
		if w.link != "" {
			if got, err := os.Readlink(root(p)); err != nil || got != w.link {
				t.Errorf("%s: link %q, %v; want %q", p, got, err, w.link)
			}
		}
	}
	sameInode := func(a, b string) {
		var sa, sb unix.Stat_t
		if unix.Lstat(root(a), &sa) != nil || unix.Lstat(root(b), &sb) != nil || sa.Ino != sb.Ino || sa.Nlink != 2 {
			t.Errorf("%s and %s are not one inode with two links (%d/%d, nlink %d)", a, b, sa.Ino, sb.Ino, sa.Nlink)
		}
	}
	sameInode("wh/links/orig.txt", "wh/links/hard.txt")
	sameInode("wh/owned.txt", "wh/layer3-hard.txt")

	for _, p := range []string{"wh/gone.txt", "wh/gonedir", "wh/opaque/a.txt", "wh/opaque/b.txt", "wh/opaque/sub"} {
		if _, err := os.Lstat(root(p)); !os.IsNotExist(err) {
			t.Errorf("%s should be gone: %v", p, err)
		}
	}
	filepath.WalkDir(root("wh"), func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(e.Name(), ".wh.") {
			t.Errorf("whiteout file visible: %s", p)
		}
		return nil
	})
	if _, err := os.Stat(root("bin/sh")); err != nil {
		t.Errorf("busybox base missing: %v", err)
	}
}
