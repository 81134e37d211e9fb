// Package image_test drives berth's ImageService through the CRI socket
// against the local test registries. Run it as
//
//	hack/build && hack/registry -- go test ./test/image/ -v
//
// Without BERTH_TEST_REGISTRY every test skips.
package image_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// registry returns the anonymous test registry's host:port, or skips.
func registry(t *testing.T) string {
	t.Helper()
	framework.RequireRoot(t)
	return framework.TestRegistry(t)
}

func spec(ref string) *runtimeapi.ImageSpec { return &runtimeapi.ImageSpec{Image: ref} }

func pull(t *testing.T, d *framework.Daemon, ref string) string {
	t.Helper()
	resp, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(ref)})
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return resp.GetImageRef()
}

func status(t *testing.T, d *framework.Daemon, ref string) *runtimeapi.Image {
	t.Helper()
	resp, err := d.Image.ImageStatus(framework.Ctx(t), &runtimeapi.ImageStatusRequest{Image: spec(ref)})
	if err != nil {
		t.Fatalf("status %s: %v", ref, err)
	}
	return resp.GetImage()
}

func list(t *testing.T, d *framework.Daemon) []*runtimeapi.Image {
	t.Helper()
	resp, err := d.Image.ListImages(framework.Ctx(t), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetImages()
}

func remove(t *testing.T, d *framework.Daemon, ref string) {
	t.Helper()
	if _, err := d.Image.RemoveImage(framework.Ctx(t), &runtimeapi.RemoveImageRequest{Image: spec(ref)}); err != nil {
		t.Fatalf("remove %s: %v", ref, err)
	}
}

// assertNoTrace checks that the daemon's image store holds nothing: no
// image, no layer, no blob, no temp file.
func assertNoTrace(t *testing.T, d *framework.Daemon) {
	t.Helper()
	if imgs := list(t, d); len(imgs) != 0 {
		t.Errorf("images listed: %v", imgs)
	}
	root := filepath.Join(d.Root, "image")
	allowed := map[string]bool{".": true, "layers": true, "content": true, "content/sha256": true, "images": true, "layer-records": true, "leases": true}
	filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if !allowed[rel] {
			t.Errorf("left in the image store: %s", rel)
			if e.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func hasPrefixIn(list []string, prefix string) bool {
	for _, v := range list {
		if strings.HasPrefix(v, prefix) {
			return true
		}
	}
	return false
}
