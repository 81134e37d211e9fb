package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// archMember is one member of a test image archive.
type archMember struct {
	name string
	body []byte
	typ  byte   // tar.TypeReg when zero
	link string // for links
	size int64  // claimed size when not len(body)
	pax  map[string]string
}

func archiveTar(t testing.TB, members ...archMember) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		hdr := &tar.Header{Name: m.name, Typeflag: m.typ, Linkname: m.link, Mode: 0o644, ModTime: epoch, PAXRecords: m.pax}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(m.body))
			if m.size != 0 {
				hdr.Size = m.size
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(m.body); err != nil && m.size == 0 {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil && !slices.ContainsFunc(members, func(m archMember) bool { return m.size != 0 }) {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustRead(t testing.TB, f func() (io.ReadCloser, error)) []byte {
	t.Helper()
	rc, err := f()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type legacyImage struct {
	img  v1.Image
	tags []string
}

// legacyArchive is what Docker 20.10's docker save writes: a directory per
// layer (VERSION, json, layer.tar, a symlink where the layer was written
// already), <config hex>.json, manifest.json, repositories.
func legacyArchive(t testing.TB, imgs ...legacyImage) []byte {
	t.Helper()
	var members, tail []archMember
	var manifest []map[string]any
	repos := map[string]map[string]string{}
	written := map[string]string{} // diff ID → layer.tar path
	for i, li := range imgs {
		cfg, err := li.img.RawConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfgName := configDigest(t, li.img)[len("sha256:"):] + ".json"
		layers, err := li.img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for j, l := range layers {
			diff, _ := l.DiffID()
			sum := sha256.Sum256([]byte(diff.String() + string(rune(i)) + string(rune(j))))
			id := hex.EncodeToString(sum[:])
			p := id + "/layer.tar"
			members = append(members, archMember{name: id + "/", typ: tar.TypeDir},
				archMember{name: id + "/VERSION", body: []byte("1.0")},
				archMember{name: id + "/json", body: []byte(`{"id":"` + id + `"}`)})
			if prev, ok := written[diff.String()]; ok {
				members = append(members, archMember{name: p, typ: tar.TypeSymlink, link: "../" + prev})
			} else {
				members = append(members, archMember{name: p, body: mustRead(t, l.Uncompressed)})
				written[diff.String()] = p
			}
			paths = append(paths, p)
		}
		members = append(members, archMember{name: cfgName, body: cfg})
		manifest = append(manifest, map[string]any{"Config": cfgName, "RepoTags": li.tags, "Layers": paths})
		for _, tag := range li.tags {
			repo, tg, _ := strings.Cut(tag, ":")
			if repos[repo] == nil {
				repos[repo] = map[string]string{}
			}
			repos[repo][tg] = strings.TrimSuffix(paths[len(paths)-1], "/layer.tar")
		}
	}
	mj, _ := json.Marshal(manifest)
	rj, _ := json.Marshal(repos)
	tail = append(tail, archMember{name: "manifest.json", body: mj}, archMember{name: "repositories", body: rj})
	return archiveTar(t, append(members, tail...)...)
}

// ggcrArchive is go-containerregistry's tarball format: compressed layers
// named by digest, the config as sha256:<hex>.
func ggcrArchive(t testing.TB, tag string, img v1.Image) []byte {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(ref, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ociLayout writes an OCI image layout with go-containerregistry; add
// appends its images and indexes. The layout is returned as a directory,
// for the caller to change before dirTar.
func ociLayout(t testing.TB, add func(layout.Path)) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	add(p)
	return dir
}

func named(ref string) layout.Option {
	return layout.WithAnnotations(map[string]string{annotationImageName: ref})
}

// dirTar is a tar of dir's content, names relative to it, sorted.
func dirTar(t testing.TB, dir string, extra ...archMember) []byte {
	t.Helper()
	var members []archMember
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			members = append(members, archMember{name: rel + "/", typ: tar.TypeDir})
			return nil
		}
		b, err := os.ReadFile(p)
		members = append(members, archMember{name: rel, body: b})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return archiveTar(t, append(members, extra...)...)
}

// docker25Archive is an OCI layout with a manifest.json beside it whose
// paths point into blobs/, as Docker 25 and later save.
func docker25Archive(t testing.TB, tag string, img v1.Image) []byte {
	t.Helper()
	ref, _ := ParseReference(tag)
	dir := ociLayout(t, func(p layout.Path) {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{annotationImageName: ref.String(), annotationRefName: ref.Tag})); err != nil {
			t.Fatal(err)
		}
	})
	layers, _ := img.Layers()
	var paths []string
	for _, l := range layers {
		d, _ := l.Digest()
		paths = append(paths, "blobs/sha256/"+d.Hex)
	}
	cfg, _ := img.ConfigName()
	mj, _ := json.Marshal([]map[string]any{{"Config": "blobs/sha256/" + cfg.Hex, "RepoTags": []string{tag}, "Layers": paths}})
	return dirTar(t, dir, archMember{name: "manifest.json", body: mj}, archMember{name: "repositories", body: []byte("{}")})
}

func platformImage(t testing.TB, arch string) v1.Image {
	t.Helper()
	img := buildImage(t, "", gzLayer(t, file("arch", arch)))
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.Architecture = arch
	img, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// multiPlatform is a layout of an index of amd64 and arm64 images, of
// which the archive lacks the arm64 blobs, as Docker's containerd store
// saves an image it pulled for one platform (kind#3795).
func multiPlatform(t testing.TB, ref string) ([]byte, v1.Image) {
	t.Helper()
	amd, arm := platformImage(t, "amd64"), platformImage(t, "arm64")
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	dir := ociLayout(t, func(p layout.Path) {
		if err := p.AppendIndex(idx, named(ref)); err != nil {
			t.Fatal(err)
		}
	})
	layers, _ := arm.Layers()
	for _, h := range []string{imageDigest(t, arm), configDigest(t, arm), digestOf(t, layers[0])} {
		if err := os.Remove(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(h, "sha256:"))); err != nil {
			t.Fatal(err)
		}
	}
	return dirTar(t, dir), amd
}

func importBytes(t testing.TB, s *Service, b []byte, opts ImportOptions) ([]Imported, error) {
	t.Helper()
	return s.Import(context.Background(), bytes.NewReader(b), opts)
}

func TestImportFormats(t *testing.T) {
	needRoot(t)
	base := gzLayer(t, dir("etc"), file("etc/base", "base"))
	top := gzLayer(t, file("hello", "world"))
	img := buildImage(t, "1000", base, top)
	other := buildImage(t, "", base, gzLayer(t, file("hello", "other")))
	id, otherID := configDigest(t, img), configDigest(t, other)
	multi, amd := multiPlatform(t, "example.com/multi:1")

	tests := []struct {
		name    string
		archive []byte
		want    map[string][]string // image ID → the tags the import reports
		digests bool                // the import reports repo digests
	}{
		{
			name:    "docker 20.10 docker-archive, two images sharing a layer",
			archive: legacyArchive(t, legacyImage{img, []string{"busybox:latest", "example.com/a/b:v1"}}, legacyImage{other, []string{"other:1"}}),
			want: map[string][]string{
				id:      {"docker.io/library/busybox:latest", "example.com/a/b:v1"},
				otherID: {"docker.io/library/other:1"},
			},
		},
		{
			name:    "untagged docker-archive",
			archive: legacyArchive(t, legacyImage{img, nil}),
			want:    map[string][]string{id: nil},
		},
		{
			name:    "go-containerregistry tarball, compressed layers",
			archive: ggcrArchive(t, "example.com/ggcr:v2", img),
			want:    map[string][]string{id: {"example.com/ggcr:v2"}},
		},
		{
			name: "OCI layout, containerd name and OCI ref name",
			archive: dirTar(t, ociLayout(t, func(p layout.Path) {
				p.AppendImage(img, named("example.com/oci:1"))
				p.AppendImage(other, layout.WithAnnotations(map[string]string{annotationRefName: "registry.k8s.io/other:2"}))
			})),
			want:    map[string][]string{id: {"example.com/oci:1"}, otherID: {"registry.k8s.io/other:2"}},
			digests: true,
		},
		{
			name: "OCI layout whose ref name is only a tag: untagged",
			archive: dirTar(t, ociLayout(t, func(p layout.Path) {
				p.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: "v1"}))
			})),
			want: map[string][]string{id: nil},
		},
		{
			name:    "docker 25 OCI layout with manifest.json",
			archive: docker25Archive(t, "busybox:1.36", img),
			want:    map[string][]string{id: {"docker.io/library/busybox:1.36"}},
			digests: true,
		},
		{
			name:    "multi-platform index lacking the other platform's blobs",
			archive: multi,
			want:    map[string][]string{configDigest(t, amd): {"example.com/multi:1"}},
			digests: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, t.TempDir(), Options{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}})
			got, err := importBytes(t, s, tt.archive, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("imported %+v, want %d images", got, len(tt.want))
			}
			for _, g := range got {
				want, ok := tt.want[g.ID]
				if !ok {
					t.Errorf("imported unexpected image %+v", g)
					continue
				}
				if !slices.Equal(g.RepoTags, want) {
					t.Errorf("image %s: tags %v, want %v", g.ID, g.RepoTags, want)
				}
				if tt.digests != (len(g.RepoDigests) > 0) && len(want) > 0 {
					t.Errorf("image %s: repo digests %v", g.ID, g.RepoDigests)
				}
				st, err := s.Status(g.ID)
				if err != nil {
					t.Fatal(err)
				}
				if st.ID != g.ID || !slices.Equal(st.RepoTags, want) || st.ManifestDigest == "" || st.Pinned {
					t.Errorf("status %+v", st)
				}
				for _, tag := range want {
					if st, err := s.Status(tag); err != nil || st.ID != g.ID {
						t.Errorf("status %s: %v %v", tag, st.ID, err)
					}
				}
				cfg, _ := v1.ParseConfigFile(bytes.NewReader(st.Config))
				if len(st.Layers) != len(cfg.RootFS.DiffIDs) {
					t.Fatalf("%d layers for %d diff IDs", len(st.Layers), len(cfg.RootFS.DiffIDs))
				}
				topDir := st.Layers[len(st.Layers)-1].Dir
				name := "hello"
				if cfg.Architecture == "amd64" && len(st.Layers) == 1 {
					name = "arch"
				}
				if _, err := os.Stat(filepath.Join(topDir, name)); err != nil {
					t.Errorf("top layer: %v", err)
				}
			}
			// What was imported survives a restart.
			s2 := newService(t, s.root, Options{})
			if n := len(s2.List("")); n != len(tt.want) {
				t.Errorf("after reopening, %d images", n)
			}
		})
	}
}

func TestImportMovesTagsAndKeepsPins(t *testing.T) {
	needRoot(t)
	s := newService(t, t.TempDir(), Options{})
	one := buildImage(t, "", gzLayer(t, file("v", "1")))
	two := buildImage(t, "", gzLayer(t, file("v", "2")))
	if _, err := importBytes(t, s, legacyArchive(t, legacyImage{one, []string{"app:latest"}}), ImportOptions{Pinned: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := importBytes(t, s, legacyArchive(t, legacyImage{two, []string{"app:latest"}}), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Status("app")
	if err != nil || st.ID != configDigest(t, two) || st.Pinned {
		t.Fatalf("app is %+v (%v), want the second image, not pinned", st, err)
	}
	old, err := s.Status(configDigest(t, one))
	if err != nil || len(old.RepoTags) != 0 || !old.Pinned {
		t.Fatalf("the first image: %+v (%v), want it untagged and still pinned", old, err)
	}
	// A second import without --pinned does not unpin.
	if _, err := importBytes(t, s, legacyArchive(t, legacyImage{one, []string{"app:old"}}), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	s2 := newService(t, s.root, Options{})
	if st, err := s2.Status("app:old"); err != nil || !st.Pinned {
		t.Errorf("after reopening: %+v %v, want pinned", st, err)
	}
}

func TestPinnedImagesOption(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	s := newService(t, root, Options{})
	a := buildImage(t, "", gzLayer(t, file("a", "a")))
	b := buildImage(t, "", gzLayer(t, file("b", "b")))
	c := buildImage(t, "", gzLayer(t, file("c", "c")))
	if _, err := importBytes(t, s, legacyArchive(t, legacyImage{a, []string{"a:1"}}, legacyImage{b, nil}, legacyImage{c, []string{"c:1"}}), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	s = newService(t, root, Options{PinnedImages: []string{"a:1", configDigest(t, b)}})
	for _, tt := range []struct {
		ref  string
		want bool
	}{{"a:1", true}, {configDigest(t, b), true}, {"c:1", false}} {
		if st, err := s.Status(tt.ref); err != nil || st.Pinned != tt.want {
			t.Errorf("%s: pinned %v (%v), want %v", tt.ref, st.Pinned, err, tt.want)
		}
	}
}

func TestTag(t *testing.T) {
	needRoot(t)
	s := newService(t, t.TempDir(), Options{})
	one := buildImage(t, "", gzLayer(t, file("v", "1")))
	two := buildImage(t, "", gzLayer(t, file("v", "2")))
	oneID, twoID := configDigest(t, one), configDigest(t, two)
	if _, err := importBytes(t, s, legacyArchive(t, legacyImage{one, []string{"one:1"}}, legacyImage{two, nil}), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		name, src, target string
		force             bool
		wantErr           error
		wantOwner         string
	}{
		{"by ID", twoID, "two:1", false, nil, twoID},
		{"by ID prefix", twoID[7:19], "two:2", false, nil, twoID},
		{"by tag", "one:1", "example.com/one:copy", false, nil, oneID},
		{"again, same image", "one:1", "example.com/one:copy", false, nil, oneID},
		{"taken, no force", twoID, "one:1", false, ErrAlreadyExists, oneID},
		{"taken, force", twoID, "one:1", true, nil, twoID},
		{"digest target", oneID, "one@" + oneID, false, ErrInvalidReference, ""},
		{"bad target", oneID, "UPPER", false, ErrInvalidReference, ""},
		{"missing source", "nothere:1", "x:1", false, ErrNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Tag(ctx, tt.src, tt.target, tt.force)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Tag: %v, want %v", err, tt.wantErr)
			}
			if tt.wantOwner != "" {
				if st, err := s.Status(tt.target); err != nil || st.ID != tt.wantOwner {
					t.Errorf("%s names %s (%v), want %s", tt.target, st.ID, err, tt.wantOwner)
				}
			}
		})
	}
	// The moved tag left image one, on disk too.
	s2 := newService(t, s.root, Options{})
	st, _ := s2.Status(oneID)
	if slices.Contains(st.RepoTags, "docker.io/library/one:1") {
		t.Errorf("image one still has its old tag: %v", st.RepoTags)
	}
}

func TestImportRefused(t *testing.T) {
	needRoot(t)
	good := buildImage(t, "", gzLayer(t, file("hello", "world")))
	goodLegacy := legacyArchive(t, legacyImage{good, []string{"good:1"}})
	cfgRaw, _ := good.RawConfigFile()
	cfgHex := configDigest(t, good)[7:]
	layers, _ := good.Layers()
	layerTar := mustRead(t, layers[0].Uncompressed)
	manifestFor := func(layer string) archMember {
		mj, _ := json.Marshal([]map[string]any{{"Config": cfgHex + ".json", "RepoTags": []string{"bad:1"}, "Layers": []string{layer}}})
		return archMember{name: "manifest.json", body: mj}
	}
	// A layer whose content differs from what the config's diff ID says.
	hostileLayer := func(entries ...entry) []byte {
		l := plainLayer(t, entries...)
		img := buildImage(t, "", l)
		return legacyArchive(t, legacyImage{img, []string{"hostile:1"}})
	}
	// The blob of an OCI layout changed after its manifest was written.
	tamperedOCI := func() []byte {
		dir := ociLayout(t, func(p layout.Path) { p.AppendImage(good, named("example.com/t:1")) })
		p := filepath.Join(dir, "blobs", "sha256", digestOf(t, layers[0])[7:])
		b, _ := os.ReadFile(p)
		b[len(b)-1] ^= 0xff
		os.WriteFile(p, b, 0o644)
		return dirTar(t, dir)
	}
	twoImagesSecondBad := func() []byte {
		bad := buildImage(t, "", gzLayer(t, file("x", "y")))
		a := legacyArchive(t, legacyImage{good, []string{"good:1"}}, legacyImage{bad, []string{"bad:1"}})
		// Flip the last layer's content: its diff ID no longer matches.
		badTar := mustRead(t, must(t, bad.Layers)[0].Uncompressed)
		i := bytes.Index(a, badTar[:512])
		a[i+512] ^= 0xff
		return a
	}

	tests := []struct {
		name    string
		archive []byte
		want    string
	}{
		{"not a tar", []byte("hello, I am no archive at all, but long enough to look like one."), "invalid image archive"},
		{"empty tar", archiveTar(t), "neither index.json nor manifest.json"},
		{"pre-1.10 docker", archiveTar(t, archMember{name: "repositories", body: []byte("{}")}), "Docker before 1.10"},
		{"member path traversal", archiveTar(t, archMember{name: "../../etc/evil", body: []byte("x")}), "out of the archive"},
		{"absolute member", archiveTar(t, archMember{name: "/etc/evil", body: []byte("x")}), "out of the archive"},
		{"symlink out", archiveTar(t, archMember{name: "manifest.json", typ: tar.TypeSymlink, link: "../../../etc/passwd"}), "out of the archive"},
		{"absolute symlink", archiveTar(t, archMember{name: "manifest.json", typ: tar.TypeSymlink, link: "/etc/passwd"}), "out of the archive"},
		{"hard link out", archiveTar(t, archMember{name: "manifest.json", typ: tar.TypeLink, link: "../etc/passwd"}), "out of the archive"},
		{"link loop", archiveTar(t, archMember{name: "a", typ: tar.TypeSymlink, link: "b"}, archMember{name: "b", typ: tar.TypeSymlink, link: "a"},
			archMember{name: cfgHex + ".json", body: cfgRaw}, manifestFor("a")), "too many links"},
		{"device member", archiveTar(t, archMember{name: "manifest.json", typ: tar.TypeChar}), "tar type"},
		{"fifo member", archiveTar(t, archMember{name: "x", typ: tar.TypeFifo}), "tar type"},
		{"duplicate member", archiveTar(t, archMember{name: "manifest.json", body: []byte("[]")}, archMember{name: "manifest.json", body: []byte("[]")}), "two members"},
		{"absurd size", archiveTar(t, archMember{name: "manifest.json", size: 1 << 60}), "more than the"},
		{"huge header", hugePAXHeader(t), "invalid image archive"},
		{"huge manifest.json", archiveTar(t, archMember{name: "manifest.json", body: bytes.Repeat([]byte(" "), maxArchiveJSON+1)}), "more than the"},
		{"no image", archiveTar(t, archMember{name: "manifest.json", body: []byte("[]")}), "holds no image"},
		{"missing layer", archiveTar(t, archMember{name: cfgHex + ".json", body: cfgRaw}, manifestFor("nothere/layer.tar")), "lacks layer"},
		{"config named by another digest", archiveTar(t, archMember{name: strings.Repeat("0", 64) + ".json", body: cfgRaw},
			archMember{name: "manifest.json", body: []byte(`[{"Config":"` + strings.Repeat("0", 64) + `.json","Layers":["l.tar"]}]`)}, archMember{name: "l.tar", body: layerTar}), "has content of digest"},
		{"layer count differs from the config", archiveTar(t, archMember{name: cfgHex + ".json", body: cfgRaw}, archMember{name: "l.tar", body: layerTar},
			archMember{name: "manifest.json", body: []byte(`[{"Config":"` + cfgHex + `.json","Layers":["l.tar","l.tar"]}]`)}), "lists 1 layers"},
		{"layer against its diff ID", twoImagesSecondBad(), "config says"},
		{"OCI blob against its descriptor", tamperedOCI(), "has content of digest"},
		{"bad repo tag", legacyArchive(t, legacyImage{good, []string{"NOT A TAG"}}), "not a tag reference"},
		{"layer path traversal", hostileLayer(file("../../escape", "x")), "escapes"},
		{"layer symlink then write through it", hostileLayer(symlink("etc", "/etc"), file("etc/evil", "x")), "escapes"},
		{"layer hard link out", hostileLayer(hardlink("passwd", "../../../etc/passwd")), "escapes"},
		{"truncated stream", goodLegacy[:len(goodLegacy)/2], "ended in the middle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, t.TempDir(), Options{})
			got, err := importBytes(t, s, tt.archive, ImportOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidArchive) {
				t.Fatalf("import: %v %v, want an invalid archive error with %q", got, err, tt.want)
			}
			assertEmptyStore(t, s)
		})
	}
}

// hugePAXHeader is a tar whose first member has a 2 MiB PAX header, which
// Go's tar writer would refuse to write: a regular member is written, then
// its type byte turned into 'x' and the header checksum fixed.
func hugePAXHeader(t testing.TB) []byte {
	t.Helper()
	rec := "comment=" + strings.Repeat("x", 2<<20) + "\n"
	n := len(rec) + 8
	rec = strconv.Itoa(n) + " " + rec
	if len(rec) != n {
		t.Fatalf("record length %d != %d", len(rec), n)
	}
	b := archiveTar(t, archMember{name: "PaxHeaders/x", body: []byte(rec)}, archMember{name: "x", body: []byte("x")})
	b[156] = 'x'
	copy(b[148:156], "        ")
	var sum int
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func must[T any](t testing.TB, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// failingReader breaks the stream after n bytes, as a client that goes
// away in the middle of an upload.
type failingReader struct {
	r io.Reader
	n int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("connection reset")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func TestImportInterrupted(t *testing.T) {
	needRoot(t)
	img := buildImage(t, "", gzLayer(t, file("hello", strings.Repeat("x", 1<<20))))
	archive := legacyArchive(t, legacyImage{img, []string{"big:1"}})
	for _, cut := range []int{100, len(archive) / 3, len(archive) - 2048} {
		s := newService(t, t.TempDir(), Options{})
		_, err := s.Import(context.Background(), &failingReader{r: bytes.NewReader(archive), n: cut}, ImportOptions{})
		if err == nil || !strings.Contains(err.Error(), "connection reset") {
			t.Errorf("cut at %d: %v, want the stream's error", cut, err)
		}
		assertEmptyStore(t, s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := newService(t, t.TempDir(), Options{})
	if _, err := s.Import(ctx, bytes.NewReader(archive), ImportOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled import: %v", err)
	}
	assertEmptyStore(t, s)
}

// TestImportSharesLayersWithPulls: an imported image whose layers the
// store has already unpacks nothing, and removing one image keeps the
// layers the other uses.
func TestImportSharesLayers(t *testing.T) {
	needRoot(t)
	base := gzLayer(t, file("base", "b"))
	a := buildImage(t, "", base)
	b := buildImage(t, "", base, gzLayer(t, file("top", "t")))
	s := newService(t, t.TempDir(), Options{})
	if _, err := importBytes(t, s, legacyArchive(t, legacyImage{a, []string{"a:1"}}), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := importBytes(t, s, dirTar(t, ociLayout(t, func(p layout.Path) { p.AppendImage(b, named("b:1")) })), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(context.Background(), "a:1"); err != nil {
		t.Fatal(err)
	}
	st, err := s.Status("b:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(st.Layers[0].Dir, "base")); err != nil {
		t.Errorf("b's base layer: %v", err)
	}
	if err := s.Remove(context.Background(), "b:1"); err != nil {
		t.Fatal(err)
	}
	assertEmptyStore(t, s)
}
