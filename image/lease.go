package image

import (
	"context"
	"fmt"
	"slices"
	"sort"
)

// Lease pins the layers of the image name refers to on behalf of holder
// (a container ID, say), so that removing the image does not take the
// layers from under a running container. Leases are recorded on disk and
// survive restarts; the holder's owner calls Release when done, and
// reconciles with Holders after a restart. Leasing again for the same
// holder replaces its lease.
func (s *Service) Lease(ctx context.Context, holder, name string) (Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := s.resolveLocked(name)
	if err != nil {
		return Image{}, err
	}
	l := &leaseRecord{Holder: holder, ImageID: img.ID}
	for _, layer := range img.Layers {
		l.Layers = append(l.Layers, layer.ChainID)
	}
	if err := s.leaseRecs.Put(holder, l); err != nil {
		return Image{}, fmt.Errorf("lease image %s for %s: %w", name, holder, err)
	}
	s.leases[holder] = l
	return s.viewLocked(img), ctx.Err()
}

// Release drops holder's lease, collecting layers no one holds any more.
// Releasing an unknown holder succeeds.
func (s *Service) Release(ctx context.Context, holder string) error {
	s.mu.Lock()
	if _, ok := s.leases[holder]; !ok {
		s.mu.Unlock()
		return nil
	}
	if err := s.leaseRecs.Delete(holder); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("release lease of %s: %w", holder, err)
	}
	delete(s.leases, holder)
	trash, err := s.collectLocked()
	s.mu.Unlock()
	s.emptyTrash(trash)
	if err != nil {
		return fmt.Errorf("release lease of %s: %w", holder, err)
	}
	return ctx.Err()
}

// Holders lists the holders of leases, sorted.
func (s *Service) Holders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.leases))
	for h := range s.leases {
		out = append(out, h)
	}
	sort.Strings(out)
	return slices.Clip(out)
}
