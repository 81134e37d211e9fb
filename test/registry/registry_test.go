// Package registry_test checks the offline test bed: the local registries that
// hack/registry starts and the test images it pushes to them. Run it as
//
//	hack/registry -- go test ./test/registry/ -v
//
// Without BERTH_TEST_REGISTRY it skips.
package registry_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// The references test/images/mkimage pushes (repository → tags), written out here on
// purpose rather than read from mkimage's table.
var expected = map[string][]string{
	"e2e-test-images/busybox": {"1.29-2"},
	"library/busybox":         {"latest", "1.36"},
	"docker/library/busybox":  {"1.35.0-glibc", "1-uclibc", "1", "1-glibc", "1-musl"},
	"berth-test/whiteout":     {"latest"},
	"berth-test/multiarch":    {"latest"},
	"berth-test/big":          {"latest"},
	// critest v1.37.0's hard-coded images (registry hosts dropped).
	"e2e-test-images/nginx":                                {"1.14-2"},
	"e2e-test-images/httpd":                                {"2.4.39-4"},
	"e2e-test-images/nonewprivs":                           {"1.3"},
	"pause":                                                {"3.9"},
	"k8s-staging-cri-tools/hostnet-nginx-amd64":            {"latest"},
	"k8s-staging-cri-tools/test-image-1":                   {"latest"},
	"k8s-staging-cri-tools/test-image-2":                   {"latest"},
	"k8s-staging-cri-tools/test-image-3":                   {"latest"},
	"k8s-staging-cri-tools/test-image-latest":              {"latest"},
	"k8s-staging-cri-tools/test-image-tag":                 {"test", "all"},
	"k8s-staging-cri-tools/test-image-tags":                {"1", "2", "3"},
	"k8s-staging-cri-tools/test-image-user-uid":            {"latest"},
	"k8s-staging-cri-tools/test-image-user-username":       {"latest"},
	"k8s-staging-cri-tools/test-image-user-uid-group":      {"latest"},
	"k8s-staging-cri-tools/test-image-user-username-group": {"latest"},
	"k8s-staging-cri-tools/test-image-predefined-group":    {"latest"},
}

var busyboxRefs = []string{
	"e2e-test-images/busybox:1.29-2",
	"library/busybox:latest",
	"library/busybox:1.36",
	"docker/library/busybox:1.35.0-glibc",
	"docker/library/busybox:1-uclibc",
	"docker/library/busybox:1",
	"docker/library/busybox:1-glibc",
	"docker/library/busybox:1-musl",
}

// target is one registry and how to log in to it.
type target struct {
	name string
	addr string
	auth authn.Authenticator
}

func targets(t *testing.T) []target {
	t.Helper()
	addr := os.Getenv("BERTH_TEST_REGISTRY")
	if addr == "" {
		t.Skip("BERTH_TEST_REGISTRY is not set: run through hack/registry -- go test ./test/registry/")
	}
	ts := []target{{"anonymous", addr, authn.Anonymous}}
	if a := os.Getenv("BERTH_TEST_AUTH_REGISTRY"); a != "" {
		ts = append(ts, target{"auth", a, &authn.Basic{
			Username: os.Getenv("BERTH_TEST_AUTH_USER"),
			Password: os.Getenv("BERTH_TEST_AUTH_PASSWORD"),
		}})
	} else {
		t.Error("BERTH_TEST_REGISTRY is set but BERTH_TEST_AUTH_REGISTRY is not")
	}
	return ts
}

func opts(t *testing.T, tg target) []remote.Option {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(tg.auth)}
}

func ref(t *testing.T, tg target, r string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(tg.addr+"/"+r, name.Insecure, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestCatalogAndTags(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			reg, err := name.NewRegistry(tg.addr, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			o := opts(t, tg)
			repos, err := remote.Catalog(context.Background(), reg, o...)
			if err != nil {
				t.Fatalf("catalog: %v", err)
			}
			for repo, tags := range expected {
				if !slices.Contains(repos, repo) {
					t.Errorf("catalog %v lacks %s", repos, repo)
					continue
				}
				got, err := remote.List(reg.Repo(strings.Split(repo, "/")...), o...)
				if err != nil {
					t.Errorf("tags of %s: %v", repo, err)
					continue
				}
				for _, tag := range tags {
					if !slices.Contains(got, tag) {
						t.Errorf("%s: tags %v lack %s", repo, got, tag)
					}
				}
			}
		})
	}
}

// readFile returns the content of path (no leading slash) in the layer, or
// ok=false. Hard links are returned as "hardlink:" + target.
func readFile(t *testing.T, l v1.Layer, path string) (string, bool) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "./") != path {
			continue
		}
		if h.Typeflag == tar.TypeLink {
			return "hardlink:" + h.Linkname, true
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), true
	}
}

// TestManifests fetches every manifest (and every config) of every expected
// reference from both registries and checks what each image must be.
func TestManifests(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			o := opts(t, tg)
			for repo, tags := range expected {
				for _, tag := range tags {
					desc, err := remote.Get(ref(t, tg, repo+":"+tag), o...)
					if err != nil {
						t.Errorf("%s:%s: %v", repo, tag, err)
						continue
					}
					if desc.MediaType.IsIndex() {
						ii, err := desc.ImageIndex()
						if err != nil {
							t.Fatal(err)
						}
						im, err := ii.IndexManifest()
						if err != nil {
							t.Fatal(err)
						}
						for _, d := range im.Manifests {
							img, err := ii.Image(d.Digest)
							if err != nil {
								t.Errorf("%s:%s: %s: %v", repo, tag, d.Digest, err)
								continue
							}
							if _, err := img.ConfigFile(); err != nil {
								t.Errorf("%s:%s: %s config: %v", repo, tag, d.Digest, err)
							}
						}
						continue
					}
					img, err := desc.Image()
					if err != nil {
						t.Fatal(err)
					}
					if _, err := img.ConfigFile(); err != nil {
						t.Errorf("%s:%s config: %v", repo, tag, err)
					}
				}
			}
		})
	}
}

func TestBusybox(t *testing.T) {
	tg := targets(t)[0]
	o := opts(t, tg)
	var digest v1.Hash
	for _, r := range busyboxRefs {
		d, err := remote.Head(ref(t, tg, r), o...)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		if digest != (v1.Hash{}) && d.Digest != digest {
			t.Errorf("%s is %s, want the same image as the other busybox tags (%s)", r, d.Digest, digest)
		}
		digest = d.Digest
	}
	img, err := remote.Image(ref(t, tg, busyboxRefs[0]), o...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Cmd, []string{"sh"}) || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("config: cmd %q os %s arch %s, want [sh] linux amd64", cf.Config.Cmd, cf.OS, cf.Architecture)
	}
	if !slices.ContainsFunc(cf.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") && strings.Contains(e, "/bin") }) {
		t.Errorf("config env %q has no PATH with /bin", cf.Config.Env)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("busybox: %d layers (%v), want 1", len(layers), err)
	}
	// critest needs /bin/ls to be a real file or a hard link, never a symlink.
	ls, ok := readFile(t, layers[0], "bin/ls")
	if !ok || !(strings.HasPrefix(ls, "hardlink:bin/") || strings.HasPrefix(ls, "\x7fELF")) {
		t.Errorf("bin/ls: %.30q (found %v), want a hard link to busybox", ls, ok)
	}
	for _, f := range []string{"bin/sh", "bin/pgrep", "bin/ipcs", "lib64/ld-linux-x86-64.so.2"} {
		if _, ok := readFile(t, layers[0], f); !ok {
			t.Errorf("busybox lacks /%s", f)
		}
	}
	passwd, _ := readFile(t, layers[0], "etc/passwd")
	for _, u := range []string{"root:x:0:0:", "www-data:x:33:33:", "nobody:x:65534:", ":x:1000:"} {
		if !strings.Contains(passwd, u) {
			t.Errorf("/etc/passwd %q lacks %q", passwd, u)
		}
	}
}

func TestMultiarch(t *testing.T) {
	tg := targets(t)[0]
	o := opts(t, tg)
	ii, err := remote.Index(ref(t, tg, "berth-test/multiarch:latest"), o...)
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Errorf("%s has no platform", d.Digest)
			continue
		}
		arch := d.Platform.Architecture
		found[d.Platform.OS+"/"+arch] = true
		img, err := ii.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch || cf.OS != d.Platform.OS {
			t.Errorf("%s: config says %s/%s, index says %s", d.Digest, cf.OS, cf.Architecture, d.Platform)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) == 0 {
			t.Fatalf("%s: no layers (%v)", d.Platform, err)
		}
		if got, _ := readFile(t, layers[len(layers)-1], "arch"); got != arch {
			t.Errorf("%s: /arch = %q, want %q", d.Platform, got, arch)
		}
	}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		if !found[p] {
			t.Errorf("index lacks %s (has %v)", p, found)
		}
	}
}

func TestLayerCounts(t *testing.T) {
	tg := targets(t)[0]
	o := opts(t, tg)
	for r, want := range map[string]int{"berth-test/whiteout:latest": 4, "berth-test/big:latest": 5} {
		img, err := remote.Image(ref(t, tg, r), o...)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		var size int64
		for _, l := range m.Layers {
			size += l.Size
		}
		if len(m.Layers) != want {
			t.Errorf("%s: %d layers, want %d", r, len(m.Layers), want)
		}
		if r == "berth-test/big:latest" && size < 100<<20 {
			t.Errorf("%s: %d bytes of layers, want >= 100 MiB", r, size)
		}
	}
}

func TestAuth(t *testing.T) {
	ts := targets(t)
	if len(ts) < 2 {
		t.Skip("no auth registry")
	}
	tg := ts[1]

	// Anonymous: 401 on the API root and on a manifest, through plain HTTP and
	// through go-containerregistry.
	for _, p := range []string{"/v2/", "/v2/library/busybox/manifests/latest", "/v2/_catalog"} {
		resp, err := http.Get("http://" + tg.addr + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s: %s, want 401", p, resp.Status)
		}
	}
	anon := target{tg.name, tg.addr, authn.Anonymous}
	_, err := remote.Get(ref(t, anon, "library/busybox:latest"), opts(t, anon)...)
	var terr *transport.Error
	if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous pull: %v, want a 401", err)
	}
	wrong := target{tg.name, tg.addr, &authn.Basic{Username: os.Getenv("BERTH_TEST_AUTH_USER"), Password: "wrong"}}
	_, err = remote.Get(ref(t, wrong, "library/busybox:latest"), opts(t, wrong)...)
	if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
		t.Errorf("pull with a wrong password: %v, want a 401", err)
	}

	// With the credentials.
	req, err := http.NewRequest(http.MethodGet, "http://"+tg.addr+"/v2/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(os.Getenv("BERTH_TEST_AUTH_USER"), os.Getenv("BERTH_TEST_AUTH_PASSWORD"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/ with credentials: %s, want 200", resp.Status)
	}
	if _, err := remote.Get(ref(t, tg, "library/busybox:latest"), opts(t, tg)...); err != nil {
		t.Errorf("pull with credentials: %v", err)
	}
}
