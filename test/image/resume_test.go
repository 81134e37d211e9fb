package image_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
)

// A proxy breaks the connection three times in the middle of berth-test/big's
// layers (20 MiB each). With a registry that honours Range the pull resumes
// each layer where it broke and fetches at most 10% more than the layers'
// size; with one that answers every request with the whole blob it still
// completes, reading the broken layers again from their start.
func TestPullResumesAfterCuts(t *testing.T) {
	reg := registry(t)
	for _, tt := range []struct {
		name    string
		noRange bool
	}{{"ranges", false}, {"no ranges", true}} {
		t.Run(tt.name, func(t *testing.T) {
			pullThroughCuts(t, reg, "berth-test/big:latest", []int64{15 << 20, 45 << 20, 75 << 20}, tt.noRange)
		})
	}
}

// TestPullResumesAfterCutsHuge is the same with three cuts inside a layer
// of 1 GiB (a measurement, not in hack/test: the image is pushed first),
// at a quarter, half and three quarters of it:
//
//	bench push-layer -size 1073741824 -ref $BERTH_TEST_REGISTRY/berth-test/huge:latest
//	BERTH_MEASURE_RESUME=berth-test/huge:latest hack/registry -- go test ./test/image/ -run CutsHuge -v
func TestPullResumesAfterCutsHuge(t *testing.T) {
	ref := os.Getenv("BERTH_MEASURE_RESUME")
	if ref == "" {
		t.Skip("a measurement: BERTH_MEASURE_RESUME names a one-layer image of 1 GiB in the test registry")
	}
	pullThroughCuts(t, registry(t), ref, []int64{256 << 20, 512 << 20, 768 << 20}, false)
}

func pullThroughCuts(t *testing.T, reg, path string, cuts []int64, noRange bool) {
	p := newProxy(t, reg)
	p.set(func(p *proxy) {
		p.cutAt = cuts
		p.noRange = noRange
	})
	d := framework.StartDaemon(t)
	ref := p.Host + "/" + path
	start := time.Now()
	id := pull(t, d, ref)
	took := time.Since(start)
	img := status(t, d, id)
	p.mu.Lock()
	sent, left := p.sent, len(p.cutAt)
	p.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d cuts not made: the pull fetched only %d bytes", left, sent)
	}
	log, err := os.ReadFile(d.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "resuming"); n != len(cuts) {
		t.Errorf("%d resumed downloads logged, want %d", n, len(cuts))
	}
	size := int64(img.GetSize()) // layers and config, compressed
	t.Logf("image %d bytes, %d fetched (%.3fx), pulled in %s", size, sent, float64(sent)/float64(size), took.Round(time.Millisecond))
	if !noRange && sent > size+size/10 {
		t.Errorf("%d bytes fetched for a %d-byte image, more than 1.1x", sent, size)
	}
	remove(t, d, id)
	assertNoTrace(t, d)
}
