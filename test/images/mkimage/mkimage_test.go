package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// fakeRootfs makes a small tree with what tarDir must preserve.
func fakeRootfs(t *testing.T) string {
	t.Helper()
	r := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(r, "bin"), 0o755))
	must(os.MkdirAll(filepath.Join(r, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(r, "tmp"), 0o777|os.ModeSticky))
	must(os.WriteFile(filepath.Join(r, "bin", "busybox"), []byte("#!fake\n"), 0o755))
	must(os.Link(filepath.Join(r, "bin", "busybox"), filepath.Join(r, "bin", "sh")))
	must(os.Link(filepath.Join(r, "bin", "busybox"), filepath.Join(r, "bin", "ls")))
	must(os.Symlink("bin", filepath.Join(r, "sbin")))
	must(os.WriteFile(filepath.Join(r, "bin", "su"), []byte("su\n"), 0o755))
	must(os.Chmod(filepath.Join(r, "bin", "su"), 0o755|os.ModeSetuid))
	if os.Geteuid() == 0 {
		must(os.Chown(filepath.Join(r, "tmp"), 1000, 1000))
	}
	return r
}

func readTar(t *testing.T, r io.Reader) (map[string]*tar.Header, map[string]string, []string) {
	t.Helper()
	hdrs, data := map[string]*tar.Header{}, map[string]string{}
	var order []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, data, order
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "/"), "/")
		hdrs[name], data[name] = h, string(b)
		order = append(order, name)
	}
}

func TestTarDir(t *testing.T) {
	r := fakeRootfs(t)
	var a, b bytes.Buffer
	if err := tarDir(&a, r); err != nil {
		t.Fatal(err)
	}
	if err := tarDir(&b, r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two tars of the same tree differ")
	}
	hdrs, data, order := readTar(t, &a)
	want := []string{"bin", "bin/busybox", "bin/ls", "bin/sh", "bin/su", "sbin", "tmp"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("entries %v, want %v", order, want)
	}
	if h := hdrs["bin/busybox"]; h.Typeflag != tar.TypeReg || data["bin/busybox"] != "#!fake\n" || h.Mode != 0o755 {
		t.Errorf("bin/busybox: %+v", h)
	}
	for _, n := range []string{"bin/ls", "bin/sh"} {
		if h := hdrs[n]; h.Typeflag != tar.TypeLink || h.Linkname != "bin/busybox" {
			t.Errorf("%s: type %q link %q, want a hard link to bin/busybox", n, h.Typeflag, h.Linkname)
		}
	}
	if h := hdrs["sbin"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "bin" {
		t.Errorf("sbin: %+v", h)
	}
	if h := hdrs["bin/su"]; h.Mode != 0o4755 {
		t.Errorf("bin/su mode %o, want 4755", h.Mode)
	}
	if h := hdrs["tmp"]; h.Mode != 0o1777 || h.Typeflag != tar.TypeDir {
		t.Errorf("tmp mode %o type %q, want 1777 dir", h.Mode, h.Typeflag)
	}
	if os.Geteuid() == 0 && (hdrs["tmp"].Uid != 1000 || hdrs["tmp"].Gid != 1000) {
		t.Errorf("tmp owner %d:%d, want 1000:1000", hdrs["tmp"].Uid, hdrs["tmp"].Gid)
	}
	for n, h := range hdrs {
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v uname %q gname %q", n, h.ModTime, h.Uname, h.Gname)
		}
	}
}

func buildAll(t *testing.T, out string, rootfs map[string]string) []builtImage {
	t.Helper()
	if err := build(out, rootfs); err != nil {
		t.Fatal(err)
	}
	cur, err := readCurrent(out, "current.json")
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// TestBuild builds the whole table twice (the second time from the cache, the
// third into a fresh cache: same digests), then checks the whiteout image's
// merged tree against the one documented in images.go.
func TestBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ~100 MB of images")
	}
	// Every -rootfs the table names gets the same fake tree.
	fake := fakeRootfs(t)
	rootfs := map[string]string{}
	specs := images()
	for _, ix := range indexes() {
		specs = append(specs, ix.images...)
	}
	for _, s := range specs {
		for _, l := range s.layers {
			if r, ok := l.(rootfsLayer); ok {
				rootfs[r.name] = fake
			}
		}
	}
	out := t.TempDir()
	first := buildAll(t, out, rootfs)
	again := buildAll(t, out, rootfs)
	fresh := buildAll(t, t.TempDir(), rootfs)
	byName := map[string]builtImage{}
	for i := range first {
		if first[i].Digest != again[i].Digest || first[i].Digest != fresh[i].Digest {
			t.Errorf("%s: digests %s, %s, %s: a rebuild must give the same", first[i].Name, first[i].Digest, again[i].Digest, fresh[i].Digest)
		}
		byName[first[i].Name] = first[i]
	}

	img, err := loadImage(byName["whiteout"].Layout)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 4 {
		t.Fatalf("whiteout: %d layers (%v), want 4", len(layers), err)
	}
	hdrs, data, _ := readTar(t, mutate.Extract(img))
	type want struct {
		kind     byte
		mode     int64
		uid      int
		data     string
		linkname string
	}
	wants := map[string]want{
		"wh":                    {tar.TypeDir, 0o755, 0, "", ""},
		"wh/keep.txt":           {tar.TypeReg, 0o644, 0, "keep\n", ""},
		"wh/opaque":             {tar.TypeDir, 0o755, 0, "", ""},
		"wh/opaque/new.txt":     {tar.TypeReg, 0o644, 0, "new\n", ""},
		"wh/recreated.txt":      {tar.TypeReg, 0o644, 0, "version 3\n", ""},
		"wh/links":              {tar.TypeDir, 0o755, 0, "", ""},
		"wh/links/orig.txt":     {tar.TypeReg, 0o644, 0, "hard\n", ""},
		"wh/links/hard.txt":     {tar.TypeLink, 0, 0, "", "wh/links/orig.txt"},
		"wh/links/rel-symlink":  {tar.TypeSymlink, 0o777, 0, "", "orig.txt"},
		"wh/links/abs-symlink":  {tar.TypeSymlink, 0o777, 0, "", "/wh/keep.txt"},
		"wh/setuid":             {tar.TypeReg, 0o4755, 0, "#!/bin/sh\necho setuid\n", ""},
		"wh/private":            {tar.TypeDir, 0o700, 1000, "", ""},
		"wh/private/secret.txt": {tar.TypeReg, 0o600, 1000, "secret\n", ""},
		"wh/owned.txt":          {tar.TypeReg, 0o640, 1000, "owned\n", ""},
		"wh/layer3-hard.txt":    {tar.TypeLink, 0, 0, "", "wh/owned.txt"},
		"bin/busybox":           {tar.TypeReg, 0o755, 0, "#!fake\n", ""},
	}
	for n, w := range wants {
		h, ok := hdrs[n]
		if !ok {
			t.Errorf("whiteout: /%s missing", n)
			continue
		}
		if h.Typeflag != w.kind || data[n] != w.data || h.Linkname != w.linkname ||
			(w.kind != tar.TypeLink && (h.Mode != w.mode || h.Uid != w.uid)) {
			t.Errorf("whiteout: /%s = type %q mode %o uid %d data %q link %q; want %+v",
				n, h.Typeflag, h.Mode, h.Uid, data[n], h.Linkname, w)
		}
	}
	for n := range hdrs {
		if strings.HasPrefix(n, "wh/") {
			if _, ok := wants[n]; !ok {
				t.Errorf("whiteout: unexpected /%s", n)
			}
		}
		if strings.Contains(n, ".wh.") {
			t.Errorf("whiteout: whiteout file /%s left in the merged tree", n)
		}
	}

	ii, err := loadIndex(byName["multiarch"].Layout)
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range im.Manifests {
		plats = append(plats, d.Platform.String())
		sub, err := ii.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		_, data, _ := readTar(t, mutate.Extract(sub))
		if data["arch"] != d.Platform.Architecture {
			t.Errorf("multiarch %s: /arch = %q", d.Platform, data["arch"])
		}
	}
	if strings.Join(plats, " ") != "linux/amd64 linux/arm64/v8" {
		t.Errorf("multiarch platforms %v", plats)
	}

	big, err := loadImage(byName["big"].Layout)
	if err != nil {
		t.Fatal(err)
	}
	m, err := big.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, l := range m.Layers {
		total += l.Size
	}
	if len(m.Layers) != 5 || total < 100<<20 {
		t.Errorf("big: %d layers, %d bytes compressed; want 5 layers, >= 100 MiB", len(m.Layers), total)
	}
}
