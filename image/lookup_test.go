package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/berth-runtime/berth/internal/idindex"
)

// An ID prefix that begins two images' IDs names neither: Status must not
// say "not found" (the kubelet would pull), Remove must not succeed
// without removing anything, and every error names the candidates.
func TestAmbiguousIDPrefix(t *testing.T) {
	s := newService(t, t.TempDir(), Options{})
	randHex := func() string {
		var b [32]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	ids := []string{"sha256:abcd" + randHex()[4:], "sha256:abcd" + randHex()[4:], "sha256:ef" + randHex()[2:]}
	s.mu.Lock()
	for _, id := range ids {
		s.images[id] = &imageRecord{ID: id}
	}
	s.mu.Unlock()

	for _, prefix := range []string{"abcd", "sha256:a", "sha256:abcd"} {
		ambiguous := func(what string, err error) {
			t.Helper()
			if errors.Is(err, ErrNotFound) || !errors.Is(err, idindex.ErrAmbiguous) {
				t.Errorf("%s %s: %v, want ambiguous, not not found", what, prefix, err)
				return
			}
			for _, id := range ids[:2] {
				if !strings.Contains(err.Error(), id) {
					t.Errorf("%s %s: %q does not name %s", what, prefix, err, id)
				}
			}
			if !strings.Contains(err.Error(), `"`+prefix+`"`) {
				t.Errorf("%s %s: %q does not name the prefix as given", what, prefix, err)
			}
		}
		_, err := s.Status(prefix)
		ambiguous("status", err)
		ambiguous("remove", s.Remove(context.Background(), prefix))
		_, err = s.Lease(context.Background(), "holder", prefix)
		ambiguous("lease", err)
		_, err = s.Tag(context.Background(), prefix, "example.com/x:1", false)
		ambiguous("tag", err)
	}
	if got := len(s.List("")); got != len(ids) {
		t.Errorf("%d images after the failed calls, want %d", got, len(ids))
	}
	for _, name := range []string{ids[2][7:13], "sha256:e", ids[0][:20], ids[0]} {
		want := ids[2]
		if strings.HasPrefix(name, "sha256:abcd") {
			want = ids[0]
		}
		if img, err := s.Status(name); err != nil || img.ID != want {
			t.Errorf("status %s = %s, %v; want %s", name, img.ID, err, want)
		}
	}
	missing := "sha256:0" + randHex()[1:]
	if _, err := s.Status(missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("status of a missing image: %v, want not found", err)
	}
	if err := s.Remove(context.Background(), missing); err != nil {
		t.Errorf("remove of a missing image: %v", err)
	}
}
