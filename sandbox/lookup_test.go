package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/internal/reserve"
)

// A prefix that begins two pods' ids is neither a pod nor a missing one:
// Stop and Remove must fail naming both (and touch neither) instead of
// answering that the pod is gone, and every other call must say it is
// ambiguous rather than not found. Only an id no pod has is idempotent.
func TestAmbiguousPrefix(t *testing.T) {
	ctx := context.Background()
	m, err := New(ctx, Options{StateDir: t.TempDir(), Network: &slowNet{}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ids := []string{"ab" + reserve.NewID()[2:], "ab" + reserve.NewID()[2:], "c" + reserve.NewID()[1:]}
	for _, id := range ids {
		m.add(&pod{rec: Record{ID: id, State: StateReady}})
	}

	ambiguous := func(what string, err error) {
		t.Helper()
		if errors.Is(err, ErrNotFound) || !errors.Is(err, idindex.ErrAmbiguous) {
			t.Errorf("%s of an ambiguous prefix: %v, want ambiguous, not not found", what, err)
			return
		}
		for _, id := range ids[:2] {
			if !strings.Contains(err.Error(), id) {
				t.Errorf("%s: %q does not name candidate %s", what, err, id)
			}
		}
		if strings.Contains(err.Error(), ids[2]) {
			t.Errorf("%s: %q names %s, which the prefix does not begin", what, err, ids[2])
		}
	}
	ambiguous("stop", m.Stop(ctx, "ab"))
	ambiguous("remove", m.Remove(ctx, "ab"))
	_, _, err = m.Status(ctx, "ab", false)
	ambiguous("status", err)
	_, err = m.Get(ctx, "a")
	ambiguous("get", err)
	for _, id := range ids {
		if p, err := m.lookup(id); err != nil || p.removed || p.rec.State != StateReady {
			t.Errorf("pod %s after the failed calls: %v", id, err)
		}
	}

	if p, err := m.lookup(ids[0][:12]); err != nil || p.rec.ID != ids[0] {
		t.Errorf("lookup by a unique prefix: %v", err)
	}
	if p, err := m.lookup("c"); err != nil || p.rec.ID != ids[2] {
		t.Errorf("lookup by a one-digit unique prefix: %v", err)
	}
	missing := "f" + reserve.NewID()[1:]
	if err := m.Stop(ctx, missing); err != nil {
		t.Errorf("stop of a missing pod: %v", err)
	}
	if err := m.Remove(ctx, missing); err != nil {
		t.Errorf("remove of a missing pod: %v", err)
	}
	if _, _, err := m.Status(ctx, missing, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("status of a missing pod: %v, want not found", err)
	}
}
