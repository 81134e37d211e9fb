package container

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/internal/reserve"
)

type noPods struct{}

func (noPods) Pod(_ context.Context, id string) (*Pod, error) { return nil, ErrNotFound }

type noImages struct{}

func (noImages) Lease(context.Context, string, string) (*Image, error) { return nil, ErrNotFound }
func (noImages) Release(context.Context, string) error                 { return nil }
func (noImages) Holders() []string                                     { return nil }
func (noImages) Pull(context.Context, string) error                    { return ErrNotFound }

func newTestService(t *testing.T) *Service {
	t.Helper()
	s, err := New(context.Background(), Options{Root: t.TempDir(), State: t.TempDir(), Pods: noPods{}, Images: noImages{}, Host: spec.SystemHost{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Stop and Remove of a container that does not exist succeed (CRI
// idempotence), but not of a prefix naming several: that one may exist.
func TestStopRemoveMissing(t *testing.T) {
	s := newTestService(t)
	ctx := context.Background()
	if err := s.Stop(ctx, reserve.NewID(), 0); err != nil {
		t.Errorf("stop of a missing container: %v", err)
	}
	if err := s.Remove(ctx, reserve.NewID()); err != nil {
		t.Errorf("remove of a missing container: %v", err)
	}
	if _, _, err := s.Status(ctx, reserve.NewID(), false); !errors.Is(err, ErrNotFound) {
		t.Errorf("status of a missing container: %v, want not found", err)
	}
	if err := s.Start(ctx, reserve.NewID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("start of a missing container: %v, want not found", err)
	}
	ids := []string{"ab" + reserve.NewID()[2:], "ab" + reserve.NewID()[2:]}
	for _, id := range ids {
		s.ctrs[id] = &ctr{rec: Record{ID: id}, exited: make(chan struct{})}
	}
	// A pod's infra container is no candidate: CRI does not name it.
	infra := "ab" + reserve.NewID()[2:]
	s.ctrs[infra] = &ctr{rec: Record{ID: infra, Sandbox: true}, exited: make(chan struct{})}
	ambiguous := func(what string, err error) {
		t.Helper()
		if errors.Is(err, ErrNotFound) || !errors.Is(err, idindex.ErrAmbiguous) {
			t.Errorf("%s of an ambiguous prefix: %v, want ambiguous, not not found", what, err)
			return
		}
		for _, id := range ids {
			if !strings.Contains(err.Error(), id) {
				t.Errorf("%s of an ambiguous prefix: %q does not name %s", what, err, id)
			}
		}
		if strings.Contains(err.Error(), infra) {
			t.Errorf("%s of an ambiguous prefix: %q names the infra container", what, err)
		}
	}
	ambiguous("stop", s.Stop(ctx, "ab", 0))
	ambiguous("remove", s.Remove(ctx, "ab"))
	_, _, err := s.Status(ctx, "ab", false)
	ambiguous("status", err)
	ambiguous("start", s.Start(ctx, "ab"))
	if _, _, err := s.Status(ctx, ids[0][:10], false); err != nil {
		t.Errorf("status by a unique prefix: %v", err)
	}
}
