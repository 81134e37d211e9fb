package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: layers carry ownership, device nodes and trusted xattrs")
	}
}

// entry is one tar member of a test layer.
type entry struct {
	name     string
	typ      byte
	body     string
	link     string
	mode     int64
	uid, gid int
	xattrs   map[string]string
	major    int64
	minor    int64
}

func file(name, body string) entry {
	return entry{name: name, typ: tar.TypeReg, body: body, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}
func hardlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeLink, link: target, mode: 0o644}
}

var epoch = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)

func tarBytes(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: epoch, Size: int64(len(e.body)),
			Devmajor: e.major, Devminor: e.minor, Format: tar.FormatPAX,
		}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		for k, v := range e.xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzLayer is a gzip-compressed Docker layer holding entries.
func gzLayer(t testing.TB, entries ...entry) v1.Layer {
	t.Helper()
	b := tarBytes(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func zstdLayer(t testing.TB, entries ...entry) v1.Layer {
	t.Helper()
	b := tarBytes(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressedCaching, tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func plainLayer(t testing.TB, entries ...entry) v1.Layer {
	t.Helper()
	return static.NewLayer(tarBytes(t, entries...), types.OCIUncompressedLayer)
}

// buildImage stacks layers into an image whose config has user.
func buildImage(t testing.TB, user string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.User = user
	cf.Config.Cmd = []string{"/bin/sh"}
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// testRegistry is an in-process registry, with hooks to watch or break
// its traffic.
type testRegistry struct {
	*httptest.Server
	host string

	mu       sync.Mutex
	blobGets map[string]int // digest → GET count
	hook     func(w http.ResponseWriter, r *http.Request) bool
}

func newTestRegistry(t testing.TB) *testRegistry {
	t.Helper()
	r := &testRegistry{blobGets: map[string]int{}}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.mu.Lock()
			r.blobGets[req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]]++
			r.mu.Unlock()
		}
		r.mu.Lock()
		hook := r.hook
		r.mu.Unlock()
		if hook != nil && hook(w, req) {
			return
		}
		reg.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	r.host = strings.TrimPrefix(r.URL, "http://")
	return r
}

func (r *testRegistry) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hook = h
}

func (r *testRegistry) gets(digest string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blobGets[digest]
}

func (r *testRegistry) push(t testing.TB, ref string, img v1.Image) string {
	t.Helper()
	full := r.host + "/" + ref
	n, err := name.ParseReference(full)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(n, img); err != nil {
		t.Fatal(err)
	}
	return full
}

func (r *testRegistry) pushIndex(t testing.TB, ref string, idx v1.ImageIndex) string {
	t.Helper()
	full := r.host + "/" + ref
	n, err := name.ParseReference(full)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(n, idx); err != nil {
		t.Fatal(err)
	}
	return full
}

func newService(t testing.TB, root string, opts Options) *Service {
	t.Helper()
	opts.Root = root
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// A daemon holds its root alone; a test that reopens one plays a
	// restart, so whatever the last service of that root was still
	// flushing is done first, and so is everything before TempDir's
	// cleanup removes the root.
	if prev, ok := servicesByRoot.Load(root); ok {
		if err := prev.(*Service).Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	servicesByRoot.Store(root, s)
	t.Cleanup(func() {
		servicesByRoot.CompareAndDelete(root, s)
		if err := s.Flush(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}

// servicesByRoot: the last service newService opened on each root.
var servicesByRoot sync.Map

// assertEmptyStore checks that a store holds nothing at all: no image, no
// layer, no blob, and no temp file anywhere under root.
func assertEmptyStore(t *testing.T, s *Service) {
	t.Helper()
	if imgs := s.List(""); len(imgs) != 0 {
		t.Errorf("images left: %v", imgs)
	}
	s.mu.Lock()
	nl := len(s.layers)
	s.mu.Unlock()
	if nl != 0 {
		t.Errorf("%d layers left in the index", nl)
	}
	allowed := map[string]bool{"": true, "layers": true, "content": true, "content/sha256": true, "images": true, "layer-records": true, "leases": true}
	filepath.WalkDir(s.root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		rel, _ := filepath.Rel(s.root, p)
		if rel == "." {
			rel = ""
		}
		if !allowed[rel] {
			t.Errorf("left in the store: %s", rel)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
}

func digestOf(t testing.TB, l v1.Layer) string {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func imageDigest(t testing.TB, img interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func configDigest(t testing.TB, img v1.Image) string {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}
