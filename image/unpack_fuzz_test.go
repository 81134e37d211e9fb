package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzApplyTar applies fuzzed layers to an empty layer root that sits
// beside a victim file, a victim directory and a victim hard-link count.
// Whatever the entries (paths with .. and /, symlinks and hard links out,
// whiteouts through links, huge names, one name replaced by another type),
// applyTar must not panic, must not leak a file descriptor, and must leave
// everything outside the layer root exactly as it was.
//
// A layer is written as lines, one entry each: a type letter, the name,
// then optional fields, separated by '|':
//
//	f name|body  d name  l name|target  h name|target  c name (null device)
//	p name (fifo)  x name|xattr|value (a file with a PAX xattr)
//
// A link target "OUTSIDE..." is the victim directory's absolute path.
func FuzzApplyTar(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root: layers carry ownership, device nodes and trusted xattrs")
	}
	for _, s := range []string{
		"d ./\nd bin\nf bin/busybox|bb\nh bin/sh|bin/busybox\nl bin/ls|/bin/busybox\nc dev/null\np run/fifo",
		"f ../evil|x",
		"f a/../../evil|x",
		"f /evil|x",
		"l link|OUTSIDE\nf link/evil|x",
		"d a\nl a/up|../..\nf a/up/evil|x",
		"l l1|l2\nl l2|../\nf l1/evil|x",
		"h stolen|../victim",
		"h stolen|/victim",
		"l link|OUTSIDE\nh stolen|link/victim",
		"l link|OUTSIDE\nf link/.wh.victim|",
		"l link|OUTSIDE\nf link/.wh..wh..opq|",
		"l link|OUTSIDE\nd link/sub",
		"l link|OUTSIDE/victim\nf link|overwrite",
		"l link|OUTSIDE/victim\nh hl|link\nf hl|x",
		"d etc\nf etc/.wh..wh..opq|\nf etc/.wh.passwd|\nf etc/.wh..|\nf .wh..wh.plnk|",
		"x etc/x|user.berth|yes\nx etc/y|trusted.overlay.redirect|/evil",
		"f replaced|old\nd replaced\nf replaced/child|c\nf replaced|new",
		"f " + strings.Repeat("n", 300) + "|long\nd " + strings.Repeat("d/", 120) + "deep",
		"l .|OUTSIDE\nf x|y",
		"d .\nf .|x",
		"l ..|OUTSIDE",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		layer, ok := fuzzLayer(script)
		if !ok {
			t.Skip()
		}
		base := t.TempDir()
		root := filepath.Join(base, "layer", "root")
		outside := filepath.Join(base, "outside")
		for _, d := range []string{root, outside} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, v := range []string{filepath.Join(outside, "victim"), filepath.Join(base, "layer", "victim"), filepath.Join(base, "victim")} {
			if err := os.WriteFile(v, []byte("v"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		layer = bytes.ReplaceAll(layer, []byte("OUTSIDE"), []byte(outside))
		before := snapshot(t, base, root)
		fds := openFDs(t)

		err := applyTar(context.Background(), quiet, bytes.NewReader(layer), root)
		if err != nil && err.Error() == "" {
			t.Fatal("error without a message")
		}
		// A leak adds descriptors; fewer after is another test's server
		// closing its connections in the background.
		if n := openFDs(t); n > fds {
			t.Fatalf("file descriptors: %d before, %d after (err %v)", fds, n, err)
		}
		after := snapshot(t, base, root)
		for p, s := range after {
			if before[p] != s {
				t.Errorf("outside the layer root: %s is %q, was %q (err %v)", p, s, before[p], err)
			}
		}
		for p := range before {
			if _, ok := after[p]; !ok {
				t.Errorf("outside the layer root: %s removed (err %v)", p, err)
			}
		}
		// Whatever the layer holds, it can be removed by the usual means.
		if err := os.RemoveAll(root); err != nil {
			t.Fatalf("layer cannot be removed: %v", err)
		}
	})
}

// fuzzLayer turns a script (FuzzApplyTar's format) into a tar stream; ok
// is false when tar cannot encode it.
func fuzzLayer(script string) (_ []byte, ok bool) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	lines := strings.Split(script, "\n")
	if len(lines) > 64 {
		return nil, false
	}
	for _, line := range lines {
		if len(line) < 2 {
			continue
		}
		fields := strings.Split(line[2:], "|")
		field := func(i int) string {
			if i < len(fields) {
				return fields[i]
			}
			return ""
		}
		hdr := &tar.Header{Name: field(0), Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX}
		body := ""
		switch line[0] {
		case 'f':
			hdr.Typeflag, body = tar.TypeReg, field(1)
		case 'd':
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		case 'l':
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, field(1)
		case 'h':
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, field(1)
		case 'c':
			hdr.Typeflag, hdr.Devmajor, hdr.Devminor = tar.TypeChar, 1, 3
		case 'p':
			hdr.Typeflag = tar.TypeFifo
		case 'x':
			hdr.Typeflag, body = tar.TypeReg, "x"
			hdr.PAXRecords = map[string]string{paxXattr + field(1): field(2)}
		default:
			continue
		}
		hdr.Size = int64(len(body))
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, false
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return nil, false
		}
	}
	if err := tw.Close(); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// snapshot describes everything under base except the layer root: type,
// mode, size, link count, content of regular files, target of symlinks.
func snapshot(t *testing.T, base, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return filepath.SkipDir
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := []byte{}
		desc = append(desc, []byte(fs.FileMode(st.Mode&0o7777).String())...)
		desc = append(desc, ' ', byte('0'+st.Nlink%10), ' ')
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc = append(desc, "file "...)
			desc = append(desc, b...)
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc = append(desc, "symlink "+l...)
		case unix.S_IFDIR:
			desc = append(desc, "dir"...)
		default:
			desc = append(desc, "other"...)
		}
		var x [64]byte
		if n, err := unix.Lgetxattr(p, "user.berth", x[:]); err == nil {
			desc = append(desc, " xattr "+string(x[:n])...)
		}
		if n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", x[:]); err == nil {
			desc = append(desc, " opaque "+string(x[:n])...)
		}
		m[p] = string(desc)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func openFDs(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}
