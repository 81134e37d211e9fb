package image

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func TestPullByTagDigestAndIndex(t *testing.T) {
	needRoot(t)
	reg := newTestRegistry(t)
	base := gzLayer(t, dir("bin"), file("bin/sh", "shell"), dir("etc"), file("etc/passwd", "root:x:0:0::/:/bin/sh\n"))
	img := buildImage(t, "1002:1003", base, zstdLayer(t, file("etc/zstd", "z")), plainLayer(t, file("etc/plain", "p")))
	ref := reg.push(t, "app:v1", img)
	other := buildImage(t, "www-data", base, gzLayer(t, file("arm", "no")))
	other, _ = mutate.ConfigFile(other, withArch(t, other, "arm64"))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	idxRef := reg.pushIndex(t, "multi:latest", idx)

	s := newService(t, t.TempDir(), Options{})
	ctx := context.Background()
	wantID := configDigest(t, img)
	manifestDigest := imageDigest(t, img)

	id, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id != wantID {
		t.Fatalf("id %s, want config digest %s", id, wantID)
	}
	st, err := s.Status(ref)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ref}; !equal(st.RepoTags, want) {
		t.Errorf("repo tags %v, want %v", st.RepoTags, want)
	}
	if want := []string{reg.host + "/app@" + manifestDigest}; !equal(st.RepoDigests, want) {
		t.Errorf("repo digests %v, want %v", st.RepoDigests, want)
	}
	if st.Size <= 0 || st.UID == nil || *st.UID != 1002 || st.Username != "" {
		t.Errorf("size %d uid %v username %q", st.Size, st.UID, st.Username)
	}
	if len(st.Layers) != 3 || !strings.Contains(string(st.Config), `"User":"1002:1003"`) {
		t.Errorf("layers %d config %s", len(st.Layers), st.Config)
	}
	for i, l := range []string{"bin/sh", "etc/zstd", "etc/plain"} {
		if _, err := os.Stat(filepath.Join(st.Layers[i].Dir, l)); err != nil {
			t.Errorf("layer %d: %v", i, err)
		}
	}
	if got := st.LowerDirs(); got[0] != st.Layers[2].Dir {
		t.Errorf("lower dirs not top first: %v", got)
	}

	// By digest: adds nothing new, the image is the same.
	byDigest := reg.host + "/app@" + manifestDigest
	if id, err := s.Pull(ctx, byDigest, nil); err != nil || id != wantID {
		t.Fatalf("pull by digest: %s, %v", id, err)
	}
	// From an index: picks linux/amd64, records the index digest.
	if id, err := s.Pull(ctx, idxRef, nil); err != nil || id != wantID {
		t.Fatalf("pull index: %s, %v", id, err)
	}
	st, _ = s.Status(wantID)
	idxDigest := reg.host + "/multi@" + imageDigest(t, idx)
	if want := []string{ref, idxRef}; !equal(st.RepoTags, want) {
		t.Errorf("repo tags %v, want %v", st.RepoTags, want)
	}
	if want := []string{byDigest, idxDigest}; !equal(st.RepoDigests, want) {
		t.Errorf("repo digests %v, want %v", st.RepoDigests, want)
	}
	for _, name := range []string{ref, idxRef, byDigest, idxDigest, reg.host + "/multi@" + manifestDigest, wantID, strings.TrimPrefix(wantID, "sha256:"), wantID[7:19]} {
		if got, err := s.Status(name); err != nil || got.ID != wantID {
			t.Errorf("status %q: %v %v", name, got.ID, err)
		}
	}
	if imgs := s.List(""); len(imgs) != 1 {
		t.Errorf("list: %d images", len(imgs))
	}
	if imgs := s.List(idxRef); len(imgs) != 1 || imgs[0].ID != wantID {
		t.Errorf("list filtered: %v", imgs)
	}
	if imgs := s.List(reg.host + "/nothing"); len(imgs) != 0 {
		t.Errorf("list filtered on nothing: %v", imgs)
	}
	u := s.FsInfo()
	if u.UsedBytes == 0 || u.InodesUsed == 0 || u.Mountpoint == "" {
		t.Errorf("fs info %+v", u)
	}
}

func withArch(t *testing.T, img v1.Image, arch string) *v1.ConfigFile {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = arch
	return cf
}

func equal(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

func TestPullErrors(t *testing.T) {
	needRoot(t)
	reg := newTestRegistry(t)
	img := buildImage(t, "", gzLayer(t, file("a", "a")))
	reg.push(t, "app:v1", img)
	arm := buildImage(t, "", gzLayer(t, file("b", "b")))
	reg.pushIndex(t, "armonly:latest", mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}}))
	s := newService(t, t.TempDir(), Options{})
	tests := []struct {
		ref  string
		want error
		msg  string
	}{
		{ref: "Bad:Ref", want: ErrInvalidReference},
		{ref: reg.host + "/app:v2", want: ErrNotFound},
		{ref: reg.host + "/nope:v1", want: ErrNotFound},
		{ref: reg.host + "/app@sha256:" + strings.Repeat("0", 64), want: ErrNotFound},
		{ref: reg.host + "/armonly", msg: "linux/amd64"},
		{ref: "127.0.0.1:1/app:v1", msg: "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			_, err := s.Pull(context.Background(), tt.ref, nil)
			if err == nil {
				t.Fatal("pull succeeded")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
			assertEmptyStore(t, s)
		})
	}
}

// A blob that is corrupted or cut short fails the pull and leaves nothing.
func TestPullBadBlobStoresNothing(t *testing.T) {
	needRoot(t)
	good := gzLayer(t, dir("d"), file("d/one", strings.Repeat("1", 50000)))
	bad := gzLayer(t, file("two", strings.Repeat("2", 50000)))
	img := buildImage(t, "", good, bad)
	badDigest := digestOf(t, bad)
	blob, err := bad.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	buf := make([]byte, 1<<20)
	for {
		n, err := blob.Read(buf)
		data = append(data, buf[:n]...)
		if err != nil {
			break
		}
	}
	tests := []struct {
		name  string
		serve func(w http.ResponseWriter)
		msg   string
	}{
		{"flipped byte", func(w http.ResponseWriter) {
			c := append([]byte(nil), data...)
			c[len(c)/2] ^= 0xff
			w.Write(c)
		}, "sha256 checksum"},
		{"truncated", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.Write(data[:len(data)/2])
		}, "unexpected EOF"},
		{"wrong blob", func(w http.ResponseWriter) {
			c, _ := gzLayer(t, file("two", "other")).Compressed()
			b := make([]byte, 1<<20)
			n, _ := c.Read(b)
			w.Write(b[:n])
		}, "sha256 checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newTestRegistry(t)
			ref := reg.push(t, "app:v1", img)
			reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+badDigest) {
					tt.serve(w)
					return true
				}
				return false
			})
			s := newService(t, t.TempDir(), Options{})
			_, err := s.Pull(context.Background(), ref, nil)
			if err == nil {
				t.Fatal("pull of a corrupt image succeeded")
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
			assertEmptyStore(t, s)
		})
	}
}

func itoa(n int) string {
	return strings.TrimSpace(strings.Replace(string(rune('0'))+"", "0", "", 1)) + fmtInt(n)
}

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// A config whose diff ID does not match the layer content fails the pull.
func TestPullDiffIDMismatch(t *testing.T) {
	needRoot(t)
	l := gzLayer(t, file("a", "a"))
	img := buildImage(t, "", l)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	img, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	reg := newTestRegistry(t)
	ref := reg.push(t, "app:v1", img)
	s := newService(t, t.TempDir(), Options{})
	_, err = s.Pull(context.Background(), ref, nil)
	if err == nil || !strings.Contains(err.Error(), "config says") {
		t.Fatalf("pull: %v", err)
	}
	assertEmptyStore(t, s)
}

func TestPullHostileLayerRefused(t *testing.T) {
	needRoot(t)
	img := buildImage(t, "", gzLayer(t, file("ok", "ok")), gzLayer(t, symlink("etc", "/etc"), file("etc/evil", "x")))
	reg := newTestRegistry(t)
	ref := reg.push(t, "evil:v1", img)
	s := newService(t, t.TempDir(), Options{})
	_, err := s.Pull(context.Background(), ref, nil)
	if err == nil || !strings.Contains(err.Error(), "escapes the layer root") {
		t.Fatalf("pull: %v", err)
	}
	if _, err := os.Stat("/etc/evil"); err == nil {
		t.Fatal("wrote /etc/evil")
	}
	assertEmptyStore(t, s)
}

func TestMirrors(t *testing.T) {
	needRoot(t)
	img := buildImage(t, "", gzLayer(t, file("a", "a")))
	upstream := newTestRegistry(t)
	upstream.push(t, "team/app:v1", img)
	mirror := newTestRegistry(t)
	mirror.push(t, "team/app:v1", img)
	empty := newTestRegistry(t)
	broken := newTestRegistry(t)
	broken.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "mirror down", http.StatusServiceUnavailable)
		return true
	})
	var upstreamHits sync.Map
	upstream.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v2/" {
			upstreamHits.Store(r.URL.Path, true)
		}
		return false
	})
	hits := func() int {
		n := 0
		upstreamHits.Range(func(any, any) bool { n++; return true })
		upstreamHits.Clear()
		return n
	}
	ref := upstream.host + "/team/app:v1"

	t.Run("mirror first", func(t *testing.T) {
		s := newService(t, t.TempDir(), Options{Registries: map[string]RegistryHost{
			upstream.host: {Mirrors: []string{"http://" + mirror.host}},
		}})
		if _, err := s.Pull(context.Background(), ref, nil); err != nil {
			t.Fatal(err)
		}
		if n := hits(); n != 0 {
			t.Errorf("upstream asked %d times although the mirror had the image", n)
		}
		st, _ := s.Status(ref)
		if !equal(st.RepoTags, []string{ref}) {
			t.Errorf("tags %v: the image must be named as asked, not after the mirror", st.RepoTags)
		}
	})
	t.Run("failing mirrors then upstream", func(t *testing.T) {
		s := newService(t, t.TempDir(), Options{Registries: map[string]RegistryHost{
			upstream.host: {Mirrors: []string{"http://127.0.0.1:1", "http://" + broken.host, "http://" + empty.host}},
		}})
		if _, err := s.Pull(context.Background(), ref, nil); err != nil {
			t.Fatal(err)
		}
		if n := hits(); n == 0 {
			t.Error("upstream not used")
		}
	})
	t.Run("all fail", func(t *testing.T) {
		s := newService(t, t.TempDir(), Options{Registries: map[string]RegistryHost{
			"nowhere.invalid": {Mirrors: []string{"http://" + broken.host}},
		}})
		_, err := s.Pull(context.Background(), "nowhere.invalid/team/app:v1", nil)
		if err == nil || !strings.Contains(err.Error(), "mirror "+broken.host) || !strings.Contains(err.Error(), "nowhere.invalid") {
			t.Fatalf("error does not name every endpoint: %v", err)
		}
	})
}

func TestBasicAuth(t *testing.T) {
	needRoot(t)
	img := buildImage(t, "", gzLayer(t, file("a", "a")))
	reg := newTestRegistry(t)
	ref := reg.push(t, "private/app:v1", img)
	reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if u, p, ok := r.BasicAuth(); ok && u == "alice" && p == "s3cret" {
			return false
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
		return true
	})
	encoded := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	tests := []struct {
		name string
		cfg  map[string]RegistryHost
		auth *AuthConfig
		ok   bool
	}{
		{name: "anonymous"},
		{name: "wrong password", auth: &AuthConfig{Username: "alice", Password: "nope"}},
		{name: "request username/password", auth: &AuthConfig{Username: "alice", Password: "s3cret"}, ok: true},
		{name: "request auth", auth: &AuthConfig{Auth: encoded, ServerAddress: reg.host}, ok: true},
		{name: "request for another server", auth: &AuthConfig{Username: "alice", Password: "s3cret", ServerAddress: "other.example"}},
		{name: "config", cfg: map[string]RegistryHost{reg.host: {Username: "alice", Password: "s3cret"}}, ok: true},
		{name: "config auth", cfg: map[string]RegistryHost{reg.host: {Auth: encoded}}, ok: true},
		{name: "request overrides config", cfg: map[string]RegistryHost{reg.host: {Auth: encoded}}, auth: &AuthConfig{Username: "alice", Password: "bad"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, t.TempDir(), Options{Registries: tt.cfg})
			_, err := s.Pull(context.Background(), ref, tt.auth)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("error %v, want ErrUnauthorized", err)
			}
			assertEmptyStore(t, s)
		})
	}
}

// Concurrent pulls of one image, and of images sharing layers, download
// every layer once.
func TestConcurrentPullsShareDownloads(t *testing.T) {
	needRoot(t)
	shared := gzLayer(t, file("shared", strings.Repeat("s", 100000)))
	l1 := gzLayer(t, file("one", "1"))
	l2 := gzLayer(t, file("two", "2"))
	img1 := buildImage(t, "", shared, l1)
	img2 := buildImage(t, "", shared, l2)
	reg := newTestRegistry(t)
	ref1 := reg.push(t, "a:v1", img1)
	ref2 := reg.push(t, "b:v1", img2)
	reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.Path, "/blobs/") {
			time.Sleep(200 * time.Millisecond) // let the pulls overlap
		}
		return false
	})
	s := newService(t, t.TempDir(), Options{})
	refs := []string{ref1, ref1, ref1, ref2, ref2}
	var wg sync.WaitGroup
	errs := make([]error, len(refs))
	for i, ref := range refs {
		wg.Go(func() { _, errs[i] = s.Pull(context.Background(), ref, nil) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []v1.Layer{shared, l1, l2} {
		if n := reg.gets(digestOf(t, l)); n != 1 {
			t.Errorf("layer %s downloaded %d times", digestOf(t, l), n)
		}
	}
	if n := len(s.List("")); n != 2 {
		t.Errorf("%d images", n)
	}
}

// One caller giving up does not fail another caller waiting for the same layer.
func TestCancelledPullDoesNotFailOthers(t *testing.T) {
	needRoot(t)
	img := buildImage(t, "", gzLayer(t, file("a", strings.Repeat("a", 10000))))
	reg := newTestRegistry(t)
	ref := reg.push(t, "a:v1", img)
	reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.Path, "/blobs/") {
			time.Sleep(300 * time.Millisecond)
		}
		return false
	})
	s := newService(t, t.TempDir(), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := s.Pull(ctx, ref, nil); done <- err }()
	time.Sleep(50 * time.Millisecond)
	if _, err := s.Pull(context.Background(), ref, nil); err != nil {
		t.Fatalf("second pull failed: %v", err)
	}
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("first pull: %v, want deadline exceeded", err)
	}
}

func TestCancelledPullLeavesNothing(t *testing.T) {
	needRoot(t)
	img := buildImage(t, "", gzLayer(t, file("a", "a")), gzLayer(t, file("b", strings.Repeat("b", 100000))))
	reg := newTestRegistry(t)
	ref := reg.push(t, "a:v1", img)
	slow := digestOf(t, mustLayer(t, img, 1))
	reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, slow) {
			time.Sleep(500 * time.Millisecond)
		}
		return false
	})
	s := newService(t, t.TempDir(), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	if _, err := s.Pull(ctx, ref, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pull: %v", err)
	}
	// The flight notices the cancellation asynchronously.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if entries, _ := os.ReadDir(s.layerDir); len(entries) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assertEmptyStore(t, s)
}

func mustLayer(t *testing.T, img v1.Image, i int) v1.Layer {
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return ls[i]
}

func TestStalledRegistry(t *testing.T) {
	needRoot(t)
	img := buildImage(t, "", gzLayer(t, file("a", strings.Repeat("a", 100000))))
	reg := newTestRegistry(t)
	ref := reg.push(t, "a:v1", img)
	layer := digestOf(t, mustLayer(t, img, 0))
	release := make(chan struct{})
	defer close(release)
	reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, layer) && r.Method == http.MethodGet {
			w.Header().Set("Content-Length", "100000")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte{0x1f, 0x8b})
			w.(http.Flusher).Flush()
			<-release
			return true
		}
		return false
	})
	s := newService(t, t.TempDir(), Options{StallTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := s.Pull(context.Background(), ref, nil)
	if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "no data from") {
		t.Fatalf("error %v, want a stall", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stall noticed after %s", d)
	}
	assertEmptyStore(t, s)
}

// Layers that arrived from a mirror before it failed are not downloaded
// again from the next endpoint.
func TestFallbackReusesLayers(t *testing.T) {
	needRoot(t)
	first := gzLayer(t, file("a", strings.Repeat("a", 1000)))
	second := gzLayer(t, file("b", strings.Repeat("b", 1000)))
	img := buildImage(t, "", first, second)
	upstream := newTestRegistry(t)
	ref := upstream.push(t, "app:v1", img)
	mirror := newTestRegistry(t)
	mirror.push(t, "app:v1", img)
	mirror.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, digestOf(t, second)) {
			time.Sleep(300 * time.Millisecond) // the first layer is in by then
			http.Error(w, "broken", http.StatusNotFound)
			return true
		}
		return false
	})
	s := newService(t, t.TempDir(), Options{Registries: map[string]RegistryHost{upstream.host: {Mirrors: []string{"http://" + mirror.host}}}})
	if _, err := s.Pull(context.Background(), ref, nil); err != nil {
		t.Fatal(err)
	}
	if n := mirror.gets(digestOf(t, first)); n != 1 {
		t.Errorf("first layer fetched %d times from the mirror", n)
	}
	if n := upstream.gets(digestOf(t, first)); n != 0 {
		t.Errorf("first layer fetched again from upstream (%d times)", n)
	}
	if n := upstream.gets(digestOf(t, second)); n != 1 {
		t.Errorf("second layer fetched %d times from upstream", n)
	}
}
