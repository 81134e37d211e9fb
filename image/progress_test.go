package image

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A pull is listed by Pulls while it runs, with what it has done, and
// counted by the metrics; concurrent pulls of it are one entry.
func TestPullsListsProgress(t *testing.T) {
	needRoot(t)
	img := buildImage(t, "", gzLayer(t, file("a", "a")), gzLayer(t, file("b", strings.Repeat("b", 100000))))
	reg := newTestRegistry(t)
	ref := reg.push(t, "a:v1", img)
	slow := digestOf(t, mustLayer(t, img, 1))
	entered, release := make(chan struct{}, 1), make(chan struct{})
	reg.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, slow) {
			entered <- struct{}{}
			<-release
		}
		return false
	})
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := newService(t, t.TempDir(), Options{Metrics: m})
	done := make(chan error, 2)
	for range 2 {
		go func() { _, err := s.Pull(context.Background(), ref, nil); done <- err }()
	}
	<-entered
	pulls := s.Pulls()
	if len(pulls) != 1 {
		t.Fatalf("two pulls of one image listed as %+v, want one entry", pulls)
	}
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, l := range mf.Layers {
		total += l.Size
	}
	if p := pulls[0]; p.Ref != ref || p.LayersTotal != 2 || p.BytesTotal != total || p.BytesDone > total {
		t.Errorf("pull listed as %+v, want ref %s, 2 layers, %d bytes", p, ref, total)
	}
	if v := testutil.ToFloat64(m.inFlight); v != 1 {
		t.Errorf("pulls in flight %v, want 1", v)
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if pulls := s.Pulls(); len(pulls) != 0 {
		t.Errorf("after the pull: %+v", pulls)
	}
	if v := testutil.ToFloat64(m.inFlight); v != 0 {
		t.Errorf("pulls in flight %v after the pull", v)
	}
	if v := testutil.ToFloat64(m.bytes); v != float64(total) {
		t.Errorf("bytes fetched %v, want %d", v, total)
	}
	if n := testutil.CollectAndCount(m.duration); n != 1 {
		t.Errorf("%d duration series, want 1 (success)", n)
	}
}
