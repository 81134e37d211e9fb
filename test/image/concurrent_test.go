package image_test

import (
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// Twenty pulls of one image at the same time make one pull: the registry
// behind a counting proxy sees one GET of the manifest (the image is a
// single-platform manifest; an index would add one GET of the platform's
// manifest) and one GET of each blob, the config included.
func TestConcurrentPullsFetchOnce(t *testing.T) {
	reg := registry(t)
	p := newProxy(t, reg)
	d := framework.StartDaemon(t)
	ref := p.Host + "/berth-test/big:latest"

	const pulls = 20
	var wg sync.WaitGroup
	ids := make([]string, pulls)
	errs := make([]error, pulls)
	for i := range ids {
		wg.Go(func() {
			resp, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(ref)})
			ids[i], errs[i] = resp.GetImageRef(), err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
		if ids[i] != ids[0] {
			t.Errorf("pull %d answered %s, pull 0 %s", i, ids[i], ids[0])
		}
	}
	mans := p.manifestGets()
	if len(mans) != 1 {
		t.Errorf("manifests fetched: %v, want the tag's only", mans)
	}
	for path, n := range mans {
		if n != 1 {
			t.Errorf("manifest %s fetched %d times", path, n)
		}
	}
	_, gets := p.stats()
	for digest, n := range gets {
		if n != 1 {
			t.Errorf("blob %s fetched %d times", digest, n)
		}
	}
	if _, ok := gets[ids[0]]; !ok {
		t.Errorf("config %s not among the blobs fetched: %v", ids[0], gets)
	}
	if len(gets) != 6 {
		t.Errorf("%d blobs fetched, want 6 (config and 5 layers): %v", len(gets), gets)
	}
}
