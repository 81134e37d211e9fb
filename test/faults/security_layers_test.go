package faults_test

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// secTarEntry is one tar entry of a hand-made layer; the name and link are
// written exactly as given, which is the point.
type secTarEntry struct {
	name string
	typ  byte
	link string
	body string
}

func secTarFile(name, body string) secTarEntry {
	return secTarEntry{name: name, typ: tar.TypeReg, body: body}
}
func secTarDir(name string) secTarEntry { return secTarEntry{name: name, typ: tar.TypeDir} }
func secTarSymlink(name, to string) secTarEntry {
	return secTarEntry{name: name, typ: tar.TypeSymlink, link: to}
}
func secTarHardlink(name, to string) secTarEntry {
	return secTarEntry{name: name, typ: tar.TypeLink, link: to}
}

// layer is a gzipped layer of the entries, in order.
func secTarLayer(t *testing.T, entries ...secTarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := int64(0o644)
		if e.typ == tar.TypeDir {
			mode = 0o755
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode,
			Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// secPushImage pushes base (nil: an empty image) plus layers to the test
// registry as ref, with a shell as its command.
func secPushImage(t *testing.T, ref string, base v1.Image, layers ...v1.Layer) {
	t.Helper()
	if base == nil {
		base = empty.Image
	}
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if len(cf.Config.Cmd) == 0 {
		cf.Config.Cmd = []string{"/bin/sh"}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	n, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(n, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// secRemoteImage fetches ref from the test registry, as a base to build on.
func secRemoteImage(t *testing.T, ref string) v1.Image {
	t.Helper()
	n, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(n, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("fetch %s: %v", ref, err)
	}
	return img
}
