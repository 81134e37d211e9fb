package image

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// Tag makes target, a tag reference, name the image src refers to (any
// form resolveLocked accepts: an ID, a prefix of one, a tag, a digest).
// A target that already names another image is moved only with force;
// without it the call fails with ErrAlreadyExists, as ctr's does.
func (s *Service) Tag(ctx context.Context, src, target string, force bool) (Image, error) {
	ref, err := ParseReference(target)
	if err != nil {
		return Image{}, err
	}
	if ref.Tag == "" {
		return Image{}, fmt.Errorf("%w %q: a tag names a repository and a tag, not a digest", ErrInvalidReference, target)
	}
	tag := ref.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := s.resolveLocked(src)
	if err != nil {
		return Image{}, fmt.Errorf("tag %s: %w", src, err)
	}
	if other, ok := s.refs[tag]; ok && other != img.ID && !force {
		return Image{}, fmt.Errorf("tag %s as %s: %w: it names image %s", src, tag, ErrAlreadyExists, other)
	}
	e := s.editLocked()
	e.tag(tag, img.ID)
	if err := e.commit(); err != nil {
		return Image{}, fmt.Errorf("tag %s as %s: %w", src, tag, err)
	}
	s.log.Info("tagged image", "image", img.ID, "tag", tag, "by", src)
	return s.viewLocked(s.images[img.ID]), ctx.Err()
}

// recordEdit stages changes to image records, so that an operation that
// touches several of them (an import of many images, a tag taken from one
// image and given to another) writes all of them or, when a write fails,
// none: the records already written are put back as they were.
type recordEdit struct {
	s       *Service
	changed map[string]*imageRecord // by ID: the version to write
	owner   map[string]string       // tag → ID, for the tags the edit moved
}

func (s *Service) editLocked() *recordEdit {
	return &recordEdit{s: s, changed: map[string]*imageRecord{}, owner: map[string]string{}}
}

// image is the staged version of record id: on first use, a copy of the
// stored one. Nil if there is neither.
func (e *recordEdit) image(id string) *imageRecord {
	if r := e.changed[id]; r != nil {
		return r
	}
	old := e.s.images[id]
	if old == nil {
		return nil
	}
	c := *old
	c.RepoTags = slices.Clone(old.RepoTags)
	c.RepoDigests = slices.Clone(old.RepoDigests)
	e.changed[id] = &c
	return &c
}

// add stages rec unless a record of its ID exists, and returns the staged
// version either way.
func (e *recordEdit) add(rec *imageRecord) *imageRecord {
	if r := e.image(rec.ID); r != nil {
		return r
	}
	e.changed[rec.ID] = rec
	return rec
}

// tag gives tag to image id, taking it from whichever image had it.
func (e *recordEdit) tag(tag, id string) {
	other, ok := e.owner[tag]
	if !ok {
		other, ok = e.s.refs[tag]
	}
	if ok && other != id {
		if o := e.image(other); o != nil {
			o.RepoTags = slices.DeleteFunc(o.RepoTags, func(t string) bool { return t == tag })
		}
	}
	img := e.image(id)
	img.RepoTags = addSorted(img.RepoTags, tag)
	e.owner[tag] = id
}

// commit writes every staged record, then indexes them.
func (e *recordEdit) commit() error {
	ids := slices.Sorted(maps.Keys(e.changed))
	for i, id := range ids {
		if err := e.s.imageRecs.Put(digestHex(id), e.changed[id]); err != nil {
			e.undo(ids[:i])
			return fmt.Errorf("record image %s: %w", id, err)
		}
	}
	// Every old version's references go before any new one's come: a tag
	// that moved must end up on its new image only.
	for _, id := range ids {
		if old := e.s.images[id]; old != nil {
			e.s.dropRefsLocked(old)
		}
	}
	for _, id := range ids {
		e.s.addImageLocked(e.changed[id])
	}
	return nil
}

func (e *recordEdit) undo(written []string) {
	for _, id := range written {
		var err error
		if old := e.s.images[id]; old != nil {
			err = e.s.imageRecs.Put(digestHex(id), old)
		} else {
			err = e.s.imageRecs.Delete(digestHex(id))
		}
		if err != nil {
			// The next start loads what is on disk: the record may then
			// carry the tags of the failed operation.
			e.s.log.Error("restore image record", "image", id, "error", err)
		}
	}
}
