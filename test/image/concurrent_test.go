package image_test

import (
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// Two pulls of one image at the same time download every layer once: the
// registry behind a counting proxy sees one GET per blob.
func TestConcurrentPullsDownloadOnce(t *testing.T) {
	reg := registry(t)
	p := newProxy(t, reg)
	d := framework.StartDaemon(t)
	ref := p.Host + "/berth-test/big:latest"

	var wg sync.WaitGroup
	ids := make([]string, 2)
	errs := make([]error, 2)
	for i := range ids {
		wg.Go(func() {
			resp, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(ref)})
			ids[i], errs[i] = resp.GetImageRef(), err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ids[0] != ids[1] {
		t.Errorf("two pulls, two ids: %v", ids)
	}
	_, gets := p.stats()
	layers := 0
	for digest, n := range gets {
		if digest == ids[0] {
			continue // the config: small, fetched by each pull to learn the layers
		}
		layers++
		if n != 1 {
			t.Errorf("blob %s fetched %d times", digest, n)
		}
	}
	if layers != 5 {
		t.Errorf("%d layer blobs fetched, want 5: %v", layers, gets)
	}
}
