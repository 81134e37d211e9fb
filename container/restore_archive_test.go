package container

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// entry is one entry of a tar a test writes.
type entry struct {
	name, body, link string
	kind             byte // tar.TypeReg when zero
}

func tarOf(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.kind, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link, ModTime: time.Unix(1e9, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const (
	goodConfig = `{"id":"abc","name":"ticker","rootfsImage":"busybox:latest","rootfsImageRef":"sha256:1234","runtime":"berth"}`
	goodSpec   = `{"ociVersion":"1.2.0","process":{"args":["sh"]}}`
)

// checkpointEntries is a well-formed archive, with changes applied.
func checkpointEntries(t *testing.T, diff []entry, change func([]entry) []entry) []entry {
	es := []entry{
		{name: configDump, body: goodConfig},
		{name: specDump, body: goodSpec},
		{name: "checkpoint/", kind: tar.TypeDir},
		{name: "checkpoint/inventory.img", body: "inv"},
		{name: "checkpoint/descriptors.json", body: `["/dev/null","pipe:[1]","pipe:[2]"]`},
		{name: rootfsDiff, body: string(tarOf(t, diff))},
		{name: deletedFiles, body: `["etc/group"]`},
		{name: dumpLog, body: "log"},
	}
	if change != nil {
		es = change(es)
	}
	return es
}

func without(name string) func([]entry) []entry {
	return func(es []entry) []entry {
		var out []entry
		for _, e := range es {
			if e.name != name {
				out = append(out, e)
			}
		}
		return out
	}
}

func with(extra ...entry) func([]entry) []entry {
	return func(es []entry) []entry { return append(es, extra...) }
}

func replaced(name, body string) func([]entry) []entry {
	return func(es []entry) []entry {
		for i := range es {
			if es[i].name == name {
				es[i].body = body
			}
		}
		return es
	}
}

func TestInspectArchive(t *testing.T) {
	okDiff := []entry{{name: "data.txt", body: "written"}, {name: "dir/", kind: tar.TypeDir}, {name: "dir/link", kind: tar.TypeSymlink, link: "/etc/passwd"}}
	for _, tc := range []struct {
		name   string
		diff   []entry
		change func([]entry) []entry
		raw    string // the file's content instead of an archive
		want   string // "" or a part of the error
	}{
		{name: "fine", diff: okDiff},
		{name: "no rootfs diff or deleted files", diff: okDiff, change: func(es []entry) []entry { return without(deletedFiles)(without(rootfsDiff)(es)) }},
		{name: "not a tar", raw: strings.Repeat("not a tar at all ", 64), want: "not a tar archive"},
		{name: "empty file", raw: "", want: "config.dump: missing"},
		{name: "no config.dump", diff: okDiff, change: without(configDump), want: "config.dump: missing"},
		{name: "no spec.dump", diff: okDiff, change: without(specDump), want: "spec.dump: missing"},
		{name: "no CRIU images", diff: okDiff, change: without("checkpoint/inventory.img"), want: "checkpoint/inventory.img: missing"},
		{name: "no descriptors", diff: okDiff, change: without("checkpoint/descriptors.json"), want: "checkpoint/descriptors.json: missing"},
		{name: "config.dump not JSON", diff: okDiff, change: replaced(configDump, "{"), want: "config.dump"},
		{name: "config.dump without image", diff: okDiff, change: replaced(configDump, `{"id":"abc"}`), want: "names no image"},
		{name: "spec.dump not a spec", diff: okDiff, change: replaced(specDump, `{"x":1}`), want: "not an OCI runtime spec"},
		{name: "deleted.files not a list", diff: okDiff, change: replaced(deletedFiles, `"etc"`), want: "deleted.files"},
		{name: "deleted.files climbs out", diff: okDiff, change: replaced(deletedFiles, `["../../etc/passwd"]`), want: "not a path in the rootfs"},
		{name: "deleted.files absolute", diff: okDiff, change: replaced(deletedFiles, `["/etc/passwd"]`), want: "not a path in the rootfs"},
		{name: "entry climbs out", diff: okDiff, change: with(entry{name: "../evil", body: "x"}), want: `"../evil" leaves`},
		{name: "entry climbs out inside", diff: okDiff, change: with(entry{name: "checkpoint/../../evil", body: "x"}), want: "leaves"},
		{name: "absolute entry", diff: okDiff, change: with(entry{name: "/etc/cron.d/evil", body: "x"}), want: "leaves"},
		{name: "symlink entry", diff: okDiff, change: with(entry{name: "checkpoint/pages-1.img", kind: tar.TypeSymlink, link: "/etc/shadow"}), want: "neither a file nor a directory"},
		{name: "diff climbs out", diff: []entry{{name: "../../../etc/cron.d/evil", body: "x"}}, want: "rootfs-diff.tar: entry"},
		{name: "diff hard link climbs out", diff: []entry{{name: "x", kind: tar.TypeLink, link: "../../etc/shadow"}}, want: "hard link"},
		{name: "diff not a tar", diff: okDiff, change: replaced(rootfsDiff, strings.Repeat("junk", 200)), want: "rootfs-diff.tar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ckpt.tar")
			data := []byte(tc.raw)
			if tc.raw == "" && tc.name != "empty file" {
				data = tarOf(t, checkpointEntries(t, tc.diff, tc.change))
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := inspectArchive(path)
			if tc.want == "" {
				if err != nil || cfg.RootfsImage != "busybox:latest" || cfg.RootfsImageRef != "sha256:1234" || cfg.Name != "ticker" {
					t.Fatalf("inspectArchive = %+v, %v", cfg, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("inspectArchive = %v, want InvalidArgument naming the archive and %q", err, tc.want)
			}
		})
	}
}

func TestArchivePath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ckpt.tar")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.tar")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	rel, _ := filepath.Rel(wd, file)
	for _, tc := range []struct {
		image string
		want  bool
	}{
		{file, true},
		{link, true},
		{dir, false},
		{filepath.Join(dir, "missing.tar"), false},
		{rel, false},
		{"busybox", false},
		{"docker.io/library/busybox:latest", false},
		{"/dev/null", false},
	} {
		if _, got := archivePath(tc.image); got != tc.want {
			t.Errorf("archivePath(%q) = %v, want %v", tc.image, got, tc.want)
		}
	}
}

// TestApplyCheckpointRootfs extracts an archive and applies its layer to
// a rootfs whose image holds a link to the host's /: what the layer
// writes through it lands in the rootfs, and the deleted files go.
func TestApplyCheckpointRootfs(t *testing.T) {
	rootfs, dir := t.TempDir(), filepath.Join(t.TempDir(), "restore")
	for _, d := range []string{"etc", "tmp"} {
		if err := os.Mkdir(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(rootfs, "etc", "group"), []byte("root:x:0:"), 0o644)
	os.WriteFile(filepath.Join(rootfs, "old.txt"), []byte("old"), 0o644)
	if err := os.Symlink("/", filepath.Join(rootfs, "host")); err != nil {
		t.Fatal(err)
	}
	marker := "berth-restore-test-" + filepath.Base(rootfs)
	diff := []entry{
		{name: "data.txt", body: "written"},
		{name: "old.txt", body: "new"},
		{name: "new/", kind: tar.TypeDir},
		{name: "new/file", body: "deep"},
		{name: "new/hard", kind: tar.TypeLink, link: "new/file"},
		{name: "new/sym", kind: tar.TypeSymlink, link: "../data.txt"},
		{name: "new/fifo", kind: tar.TypeFifo},
		{name: "host/tmp/" + marker, body: "escaped?"},
	}
	archive := filepath.Join(t.TempDir(), "ckpt.tar")
	if err := os.WriteFile(archive, tarOf(t, checkpointEntries(t, diff, nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := inspectArchive(archive); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := extractArchive(archive, dir); err != nil {
		t.Fatalf("extractArchive: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint", "inventory.img")); err != nil {
		t.Fatalf("CRIU's images not extracted: %v", err)
	}
	if err := applyCheckpointRootfs(rootfs, dir); err != nil {
		t.Fatalf("applyCheckpointRootfs: %v", err)
	}
	if _, err := os.Lstat(filepath.Join("/tmp", marker)); err == nil {
		os.Remove(filepath.Join("/tmp", marker))
		t.Fatalf("the layer wrote through the image's link to the host's /tmp")
	}
	for name, want := range map[string]string{"data.txt": "written", "old.txt": "new", "new/file": "deep", "new/hard": "deep", "new/sym": "written", "tmp/" + marker: "escaped?"} {
		if got, err := os.ReadFile(filepath.Join(rootfs, name)); err != nil || string(got) != want {
			t.Errorf("%s: %q (%v), want %q", name, got, err, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(rootfs, "new", "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("new/fifo: %v (%v)", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(rootfs, "etc", "group")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etc/group, in deleted.files, is still there (%v)", err)
	}
}
