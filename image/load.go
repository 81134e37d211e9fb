package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-runtime/berth/internal/store"
)

// load rebuilds the in-memory index from the records and removes what a
// crash or a failed pull left behind. Order matters: a layer directory
// becomes part of the store when its record is written (after the rename),
// and stops being part of it when its record is deleted (before the
// directory goes), so a directory without a record is always debris.
func (s *Service) load(ctx context.Context) error {
	if err := s.removeTemps(); err != nil {
		return err
	}

	layers, corrupt, err := s.layerRecs.LoadAll()
	if err != nil {
		return err
	}
	s.noteUnreadable("layer", corrupt)
	for key, l := range layers {
		if fi, err := os.Stat(s.layerPath(l.ChainID)); err != nil || !fi.IsDir() || digestHex(l.ChainID) != key {
			s.log.Warn("dropping record of missing layer", "layer", l.ChainID)
			if err := s.layerRecs.Delete(key); err != nil {
				return err
			}
			continue
		}
		if l.PendingBoot != "" && l.PendingBoot != s.bootID {
			// Published, not yet flushed, and the machine has rebooted
			// since: its files may be empty. Dropped with the images
			// that need it; the kubelet pulls them again.
			s.log.Warn("dropping layer not flushed before a reboot", "layer", l.ChainID, "boot", l.PendingBoot)
			if err := s.layerRecs.Delete(key); err != nil {
				return err
			}
			continue
		}
		s.layers[l.ChainID] = l
	}
	entries, err := os.ReadDir(s.layerDir)
	if err != nil {
		return fmt.Errorf("list layers: %w", err)
	}
	for _, e := range entries {
		if _, ok := s.layers["sha256:"+e.Name()]; ok || s.foreign {
			continue
		}
		s.log.Info("removing unrecorded layer directory", "dir", e.Name())
		if err := os.RemoveAll(filepath.Join(s.layerDir, e.Name())); err != nil {
			return fmt.Errorf("remove stray layer %s: %w", e.Name(), err)
		}
	}

	images, corrupt, err := s.imageRecs.LoadAll()
	if err != nil {
		return err
	}
	s.noteUnreadable("image", corrupt)
	for key, img := range images {
		if err := s.restoreImage(img); err != nil {
			// A repull repairs it; refusing to start would help nobody.
			s.log.Warn("dropping damaged image", "image", img.ID, "error", err)
			if err := s.imageRecs.Delete(key); err != nil {
				return err
			}
			continue
		}
		s.addImageLocked(img)
	}

	leases, corrupt, err := s.leaseRecs.LoadAll()
	if err != nil {
		return err
	}
	s.noteUnreadable("lease", corrupt)
	for _, l := range leases {
		s.leases[l.Holder] = l
	}

	s.mu.Lock()
	trash, err := s.collectLocked()
	s.mu.Unlock()
	s.emptyTrash(trash)
	if err != nil {
		return err
	}
	if s.foreign {
		s.log.Warn("image garbage collection off: records of another format version are in the store (a newer berth's?), and what they hold is unknown", "root", s.root)
		s.log.Info("image store loaded", "images", len(s.images), "layers", len(s.layers), "leases", len(s.leases))
		return ctx.Err()
	}
	keep := map[v1.Hash]bool{}
	for _, img := range s.images {
		for _, d := range img.blobs() {
			keep[d] = true
		}
	}
	if err := s.content.sweep(keep); err != nil {
		return err
	}
	s.log.Info("image store loaded", "images", len(s.images), "layers", len(s.layers), "leases", len(s.leases))
	return ctx.Err()
}

// noteUnreadable logs the records of one kind LoadAll did not load; one
// of another format version turns garbage collection off.
func (s *Service) noteUnreadable(kind string, corrupt []store.Corrupt) {
	for _, c := range corrupt {
		if c.Kept {
			s.foreign = true
			s.log.Warn("image store record of another format version: left as it is", "kind", kind, "id", c.ID, "path", c.Path, "error", c.Err)
			continue
		}
		s.log.Warn("unreadable image store record moved aside", "kind", kind, "id", c.ID, "path", c.Path, "error", c.Err)
	}
}

// removeTemps deletes unfinished layers and import spools.
func (s *Service) removeTemps() error {
	for _, dir := range []string{s.layerDir, s.root} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("list %s: %w", dir, err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tempPrefix) {
				if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
					return fmt.Errorf("remove unfinished %s: %w", e.Name(), err)
				}
			}
		}
	}
	return nil
}

// restoreImage checks that everything img needs is on disk and loads the
// parts kept in memory.
func (s *Service) restoreImage(img *imageRecord) error {
	for _, l := range img.Layers {
		if _, ok := s.layers[l.ChainID]; !ok {
			return fmt.Errorf("layer %s is missing", l.ChainID)
		}
	}
	for _, d := range img.blobs() {
		if _, err := os.Stat(mustPath(s.content, d)); err != nil {
			return fmt.Errorf("blob %s: %w", d, err)
		}
	}
	id, err := v1.NewHash(img.ID)
	if err != nil {
		return fmt.Errorf("bad image id: %w", err)
	}
	cfg, err := s.content.get(id)
	if err != nil {
		return err
	}
	return img.setConfig(cfg)
}

func mustPath(c *contentStore, d v1.Hash) string {
	p, err := c.path(d)
	if err != nil {
		return filepath.Join(c.dir, "invalid")
	}
	return p
}

// blobs are the digests of the content-store entries img owns.
func (img *imageRecord) blobs() []v1.Hash {
	var out []v1.Hash
	for _, d := range []string{img.ID, img.ManifestDigest, img.IndexDigest} {
		if h, err := v1.NewHash(d); err == nil {
			out = append(out, h)
		}
	}
	return out
}
