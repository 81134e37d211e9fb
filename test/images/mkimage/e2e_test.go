package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// The references k8s.io/kubernetes v1.37.2's test/utils/image/manifest.go
// (and the memory QoS specs' hard-coded busybox) gives the images the
// node e2e suite and e2e.test's Conformance specs pull, minus the registry
// host (registry.k8s.io).
var upstreamE2ERefs = []string{
	"e2e-test-images/agnhost:2.66.1",
	"e2e-test-images/agnhost:2.55",
	"e2e-test-images/busybox:1.37.0-2",
	"e2e-test-images/busybox:1.36.1-1",
	"e2e-test-images/ipc-utils:1.4",
	"e2e-test-images/nginx:1.27.0-2",
	"e2e-test-images/nginx:1.28.0-2",
	"e2e-test-images/nonewprivs:1.4",
	"e2e-test-images/nonroot:1.5",
	"e2e-test-images/glibc-dns-testing:2.1.1",
	"pause:3.10.2",
	"e2e-test-images/kitten:1.8",
	"e2e-test-images/nautilus:1.8",
	"e2e-test-images/sample-apiserver:1.29.2",
}

// TestE2E builds the e2e table from fake root filesystems (a different one
// per agnhost tag, as the real binaries differ) twice, and checks that every
// upstream name is there once, that the images the specs tell apart by id
// (the agnhost tags, the nginx tags) have different ids, and agnhost's
// entrypoint.
func TestE2E(t *testing.T) {
	v := e2eVersions{agnhost: []string{"2.66.1", "2.55"}}
	fake := fakeRootfs(t)
	rootfs := map[string]string{}
	for _, s := range append(e2eImages(v, entriesLayer{}), e2ePause()) {
		for _, l := range s.layers {
			if r, ok := l.(rootfsLayer); ok {
				rootfs[r.name] = fake
			}
		}
	}
	for _, tag := range v.agnhost {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, "agnhost"), []byte("agnhost "+tag), 0o755); err != nil {
			t.Fatal(err)
		}
		rootfs["agnhost-"+tag] = d
	}
	out := t.TempDir()
	var runs [2][]builtImage
	for i := range runs {
		if err := buildE2E(out, rootfs, v); err != nil {
			t.Fatal(err)
		}
		cur, err := readCurrent(out, e2eCurrent)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = cur
	}
	if len(runs[0]) != len(runs[1]) {
		t.Fatalf("%d images, then %d", len(runs[0]), len(runs[1]))
	}
	for i := range runs[0] {
		if runs[0][i].Digest != runs[1][i].Digest {
			t.Errorf("%s: %s, then %s from the cache", runs[0][i].Name, runs[0][i].Digest, runs[1][i].Digest)
		}
	}

	byRef := map[string]builtImage{}
	for _, bi := range runs[0] {
		for _, r := range bi.Refs {
			if _, dup := byRef[r]; dup {
				t.Errorf("%s is pushed twice", r)
			}
			byRef[r] = bi
		}
	}
	for _, r := range upstreamE2ERefs {
		if _, ok := byRef[r]; !ok {
			t.Errorf("no image is pushed as %s", r)
		}
	}
	if len(byRef) != len(upstreamE2ERefs) {
		t.Errorf("%d references pushed, want the %d upstream ones", len(byRef), len(upstreamE2ERefs))
	}

	imageID := func(ref string) string {
		t.Helper()
		img, err := loadImage(byRef[ref].Layout)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		h, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		return h.String()
	}
	for _, pair := range [][2]string{
		{"e2e-test-images/agnhost:2.66.1", "e2e-test-images/agnhost:2.55"},
		{"e2e-test-images/nginx:1.27.0-2", "e2e-test-images/nginx:1.28.0-2"},
		{"e2e-test-images/kitten:1.8", "e2e-test-images/nautilus:1.8"},
	} {
		if a, b := imageID(pair[0]), imageID(pair[1]); a == b {
			t.Errorf("%s and %s have one image id, %s: the specs need two", pair[0], pair[1], a)
		}
	}

	img, err := loadImage(byRef["e2e-test-images/agnhost:2.66.1"].Layout)
	if err != nil {
		t.Fatal(err)
	}
	// The fake registry: pause:testing names the pause image, whose
	// manifest, config and layers are under their digests.
	pause, err := loadImage(byRef["pause:3.10.2"].Layout)
	if err != nil {
		t.Fatal(err)
	}
	_, files, _ := readTar(t, mutate.Extract(img))
	pauseDigest, _ := pause.Digest()
	blob := func(kind string, h v1.Hash) string {
		return "var/registry/pause/" + kind + "/sha256/" + h.Hex[:2] + "/" + h.Hex + "/data"
	}
	if got := files["var/registry/pause/manifests/testing"]; got != pauseDigest.String() {
		t.Errorf("fake registry: pause:testing names %q, want %s", got, pauseDigest)
	}
	rawManifest, _ := pause.RawManifest()
	if files[blob("manifests", pauseDigest)] != string(rawManifest) {
		t.Error("fake registry: the pause manifest is not under its digest")
	}
	m, _ := pause.Manifest()
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if data, ok := files[blob("blobs", d.Digest)]; !ok || int64(len(data)) != d.Size {
			t.Errorf("fake registry: blob %s missing or not %d bytes", d.Digest, d.Size)
		}
	}
	for _, ref := range []string{"e2e-test-images/kitten:1.8", "e2e-test-images/nautilus:1.8"} {
		vi, err := loadImage(byRef[ref].Layout)
		if err != nil {
			t.Fatal(err)
		}
		_, vfiles, _ := readTar(t, mutate.Extract(vi))
		if !strings.Contains(vfiles["etc/os-release"], "Alpine Linux") {
			t.Errorf("%s: /etc/os-release %q does not name Alpine Linux, which the image volume spec reads", ref, vfiles["etc/os-release"])
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/agnhost"}) || !slices.Equal(cf.Config.Cmd, []string{"pause"}) {
		t.Errorf("agnhost: entrypoint %q cmd %q, want [/agnhost] [pause] as upstream's", cf.Config.Entrypoint, cf.Config.Cmd)
	}
}
