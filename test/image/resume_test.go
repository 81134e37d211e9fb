package image_test

import (
	"os"
	"strings"
	"testing"

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
			p := newProxy(t, reg)
			p.set(func(p *proxy) {
				p.cutAt = []int64{15 << 20, 45 << 20, 75 << 20}
				p.noRange = tt.noRange
			})
			d := framework.StartDaemon(t)
			ref := p.Host + "/berth-test/big:latest"
			id := pull(t, d, ref)
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
			if n := strings.Count(string(log), "resuming"); n != 3 {
				t.Errorf("%d resumed downloads logged, want 3", n)
			}
			size := int64(img.GetSize()) // layers and config, compressed
			t.Logf("image %d bytes, %d fetched (%.3fx)", size, sent, float64(sent)/float64(size))
			if !tt.noRange && sent > size+size/10 {
				t.Errorf("%d bytes fetched for a %d-byte image, more than 1.1x", sent, size)
			}
			remove(t, d, id)
			assertNoTrace(t, d)
		})
	}
}
