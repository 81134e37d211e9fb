package container

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-runtime/berth/container/spec"
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
	if err := s.Stop(ctx, newID(), 0); err != nil {
		t.Errorf("stop of a missing container: %v", err)
	}
	if err := s.Remove(ctx, newID()); err != nil {
		t.Errorf("remove of a missing container: %v", err)
	}
	if _, _, err := s.Status(ctx, newID(), false); !errors.Is(err, ErrNotFound) {
		t.Errorf("status of a missing container: %v, want not found", err)
	}
	if err := s.Start(ctx, newID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("start of a missing container: %v, want not found", err)
	}
	for _, id := range []string{"ab" + newID()[2:], "ab" + newID()[2:]} {
		s.ctrs[id] = &ctr{rec: Record{ID: id}, exited: make(chan struct{})}
	}
	if err := s.Stop(ctx, "ab", 0); !errors.Is(err, ErrNotFound) || !errors.Is(err, errAmbiguous) {
		t.Errorf("stop of an ambiguous prefix: %v", err)
	}
	if err := s.Remove(ctx, "ab"); !errors.Is(err, ErrNotFound) || !errors.Is(err, errAmbiguous) {
		t.Errorf("remove of an ambiguous prefix: %v", err)
	}
}
