package image

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// contentStore keeps small blobs (manifests, indexes, configs) by digest.
// Layers are not kept compressed: they are unpacked while downloading.
type contentStore struct {
	dir string // <root>/content/sha256
}

func newContentStore(dir string) (*contentStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create content store: %w", err)
	}
	return &contentStore{dir: dir}, nil
}

func (c *contentStore) path(d v1.Hash) (string, error) {
	if d.Algorithm != "sha256" || len(d.Hex) != 64 || strings.Trim(d.Hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("unsupported digest %q", d)
	}
	return filepath.Join(c.dir, d.Hex), nil
}

// put stores data under digest d after checking that it is d's content.
func (c *contentStore) put(d v1.Hash, data []byte) error {
	p, err := c.path(d)
	if err != nil {
		return err
	}
	got, _, err := v1.SHA256(bytes.NewReader(data))
	if err != nil {
		return err
	}
	if got != d {
		return fmt.Errorf("blob %s: content has digest %s", d, got)
	}
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	tmp, err := os.CreateTemp(c.dir, tempPrefix+d.Hex+"-*")
	if err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	return nil
}

func (c *contentStore) get(d v1.Hash) ([]byte, error) {
	p, err := c.path(d)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", d, err)
	}
	return data, nil
}

func (c *contentStore) remove(d v1.Hash) error {
	p, err := c.path(d)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove blob %s: %w", d, err)
	}
	return nil
}

// sweep removes temp files and every blob not in keep.
func (c *contentStore) sweep(keep map[v1.Hash]bool) error {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("list content store: %w", err)
	}
	for _, e := range entries {
		if keep[v1.Hash{Algorithm: "sha256", Hex: e.Name()}] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(c.dir, e.Name())); err != nil {
			return fmt.Errorf("remove stray blob %s: %w", e.Name(), err)
		}
	}
	return nil
}
