package image

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth-runtime/berth/internal/faultpoint"
)

// Remove deletes the image name refers to, with all its tags and digests,
// whichever of them name picks. Removing an image that is not there
// succeeds. Its layers go too, unless another image or a lease still
// holds them.
func (s *Service) Remove(ctx context.Context, name string) error {
	s.mu.Lock()
	img, err := s.resolveLocked(name)
	if errors.Is(err, ErrNotFound) {
		s.mu.Unlock()
		return nil
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if err := s.imageRecs.Delete(digestHex(img.ID)); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	s.dropRefsLocked(img)
	delete(s.images, img.ID)
	trash, cerr := s.collectLocked()
	stillUsed := map[string]bool{}
	for _, other := range s.images {
		for _, d := range other.blobs() {
			stillUsed[d.String()] = true
		}
	}
	s.mu.Unlock()
	s.faults.Hit(faultpoint.RemoveImageRecord, img.ID)

	s.emptyTrash(trash)
	for _, d := range img.blobs() {
		if stillUsed[d.String()] {
			continue
		}
		if err := s.content.remove(d); err != nil {
			s.log.Warn("remove image blob", "image", img.ID, "error", err)
		}
	}
	s.log.Info("removed image", "image", img.ID, "tags", img.RepoTags, "by", name)
	if cerr != nil {
		return fmt.Errorf("remove image %s: collect layers: %w", name, cerr)
	}
	return ctx.Err()
}
