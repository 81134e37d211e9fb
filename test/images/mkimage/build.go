package main

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// keyVersion is part of every cache key: bump it when the way images are made
// changes in a way their inputs do not show (tar header fields, config fields).
const keyVersion = "mkimage-v1"

// builtImage is one pushable entry of $BERTH_IMAGES/current.json.
type builtImage struct {
	Name   string   `json:"name"`
	Refs   []string `json:"refs"`
	Layout string   `json:"layout"` // an OCI image layout whose index.json has this one manifest
	Digest string   `json:"digest"` // of the image manifest or the image index
	Index  bool     `json:"index"`
}

type builder struct {
	out    string            // $BERTH_IMAGES
	rootfs map[string]string // -rootfs NAME=DIR
	tmp    string            // scratch directory for layer tars
	// keys caches the content key of a rootfs/entries layer by its source:
	// the sha256 of its tar, streamed, never written (a cached image needs
	// only the key, and a kind node's binaries make a few hundred MB of it).
	keys map[string]string
	// tars caches the tar file of a layer by its source, for the images that
	// must be built.
	tars map[string]string
	// layers caches a layer compressed by its source, level and media type:
	// images that share base layers (busybox, agnhost's userland) compress
	// them once.
	layers map[string]v1.Layer
}

// layerKey returns what identifies the layer's content: its declared key, or
// the sha256 of its tar.
func (b *builder) layerKey(src layerSource) (string, error) {
	if k := src.key(); k != "" {
		return k, nil
	}
	id := sourceID(src)
	if k, ok := b.keys[id]; ok {
		return k, nil
	}
	h := sha256.New()
	if err := src.writeTar(h, b.rootfs); err != nil {
		return "", fmt.Errorf("layer %q: %w", src.describe(), err)
	}
	k := "sha256:" + hex.EncodeToString(h.Sum(nil))
	b.keys[id] = k
	return k, nil
}

func sourceID(src layerSource) string { return fmt.Sprintf("%T%+v", src, src) }

// imageKey hashes everything an image is made from.
func (b *builder) imageKey(spec imageSpec) (string, error) {
	type layerIn struct{ Content, CreatedBy string }
	in := struct {
		Version  string
		OCI      bool
		Platform v1.Platform
		Config   v1.Config
		Gzip     int
		Layers   []layerIn
	}{keyVersion, spec.oci, spec.platform, spec.config, spec.gzipLevel, nil}
	for _, src := range spec.layers {
		k, err := b.layerKey(src)
		if err != nil {
			return "", err
		}
		in.Layers = append(in.Layers, layerIn{k, src.describe()})
	}
	return hashJSON(in)
}

func hashJSON(v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16]), nil
}

// buildImage returns the image from its cached layout, building it first when
// no layout exists for its key.
func (b *builder) buildImage(spec imageSpec) (v1.Image, string, error) {
	key, err := b.imageKey(spec)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", spec.name, err)
	}
	dir := filepath.Join(b.out, "oci", spec.name, key)
	if img, err := loadImage(dir); err == nil {
		log.Printf("%s: cached (%s)", spec.name, dir)
		return img, dir, nil
	}
	start := time.Now()
	img, err := b.makeImage(spec)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", spec.name, err)
	}
	if err := writeLayout(dir, func(p layout.Path) error { return p.AppendImage(img) }); err != nil {
		return nil, "", fmt.Errorf("%s: %w", spec.name, err)
	}
	log.Printf("%s: built in %s (%s)", spec.name, time.Since(start).Round(time.Millisecond), dir)
	img, err = loadImage(dir)
	return img, dir, err
}

func (b *builder) makeImage(spec imageSpec) (v1.Image, error) {
	layerType := types.DockerLayer
	img := empty.Image
	if spec.oci {
		layerType = types.OCILayer
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	}
	level := spec.gzipLevel
	if level == 0 {
		level = gzip.DefaultCompression
	}
	var adds []mutate.Addendum
	for _, src := range spec.layers {
		id := fmt.Sprintf("%s gzip %d %s", sourceID(src), level, layerType)
		layer, ok := b.layers[id]
		if !ok {
			tarPath, err := b.tarPath(src)
			if err != nil {
				return nil, err
			}
			layer, err = tarball.LayerFromOpener(
				func() (io.ReadCloser, error) { return os.Open(tarPath) },
				tarball.WithCompressionLevel(level),
				tarball.WithMediaType(layerType),
				// Compress once for the digest and reuse it for the layout.
				tarball.WithCompressedCaching,
			)
			if err != nil {
				return nil, err
			}
			b.layers[id] = layer
		}
		adds = append(adds, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "berth mkimage: " + src.describe()},
		})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS = spec.platform.OS
	cf.Architecture = spec.platform.Architecture
	cf.Variant = spec.platform.Variant
	cf.Config = spec.config
	return mutate.ConfigFile(img, cf)
}

// tarPath returns the layer's uncompressed tar, written into b.tmp the first
// time an image being built needs it.
func (b *builder) tarPath(src layerSource) (string, error) {
	id := sourceID(src)
	if p, ok := b.tars[id]; ok {
		return p, nil
	}
	key, err := b.layerKey(src)
	if err != nil {
		return "", err
	}
	p, diffID, err := writeTarFile(b.tmp, src, b.rootfs)
	if err != nil {
		return "", err
	}
	if src.key() == "" && key != "sha256:"+diffID {
		return "", fmt.Errorf("layer %q changed while the image was built", src.describe())
	}
	b.tars[id] = p
	return p, nil
}

// buildIndex builds the index's images, then the index, each cached.
func (b *builder) buildIndex(spec indexSpec) (v1.ImageIndex, string, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var keys []string
	var adds []mutate.IndexAddendum
	for _, is := range spec.images {
		img, dir, err := b.buildImage(is)
		if err != nil {
			return nil, "", err
		}
		keys = append(keys, filepath.Base(dir))
		platform := is.platform
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	key, err := hashJSON(struct {
		Version string
		Images  []string
	}{keyVersion, keys})
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Join(b.out, "oci", spec.name, key)
	if ii, err := loadIndex(dir); err == nil {
		log.Printf("%s: cached (%s)", spec.name, dir)
		return ii, dir, nil
	}
	idx = mutate.AppendManifests(idx, adds...)
	if err := writeLayout(dir, func(p layout.Path) error { return p.AppendIndex(idx) }); err != nil {
		return nil, "", fmt.Errorf("%s: %w", spec.name, err)
	}
	log.Printf("%s: built (%s)", spec.name, dir)
	ii, err := loadIndex(dir)
	return ii, dir, err
}

// writeLayout makes an OCI layout in a temporary directory beside dir and
// renames it into place, so dir exists only complete. A concurrent build that
// got there first wins (same key, same content).
func writeLayout(dir string, add func(layout.Path) error) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := add(p); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "index.json")); serr == nil {
			return nil
		}
		return err
	}
	return nil
}

// top returns the one manifest descriptor of a layout written by writeLayout.
func top(dir string) (v1.ImageIndex, v1.Descriptor, error) {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, v1.Descriptor{}, err
	}
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	m, err := ii.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if len(m.Manifests) != 1 {
		return nil, v1.Descriptor{}, fmt.Errorf("%s: %d manifests, want 1", dir, len(m.Manifests))
	}
	return ii, m.Manifests[0], nil
}

func loadImage(dir string) (v1.Image, error) {
	ii, d, err := top(dir)
	if err != nil {
		return nil, err
	}
	if d.MediaType.IsIndex() {
		return nil, errors.New(dir + ": is an index")
	}
	return ii.Image(d.Digest)
}

func loadIndex(dir string) (v1.ImageIndex, error) {
	ii, d, err := top(dir)
	if err != nil {
		return nil, err
	}
	if !d.MediaType.IsIndex() {
		return nil, errors.New(dir + ": is not an index")
	}
	return ii.ImageIndex(d.Digest)
}

// withBuilder runs f with a builder whose scratch directory lives in out
// (beside the layouts, so tars are renamed, not copied) until f returns.
func withBuilder(out string, rootfs map[string]string, f func(*builder) error) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	return f(&builder{out: out, rootfs: rootfs, tmp: tmp, keys: map[string]string{}, tars: map[string]string{}, layers: map[string]v1.Layer{}})
}

// build builds (or finds cached) every image and index of the table and
// writes $BERTH_IMAGES/current.json, which push reads.
func build(out string, rootfs map[string]string) error {
	return withBuilder(out, rootfs, buildTable)
}

func buildTable(b *builder) error {
	out := b.out
	var current []builtImage
	for _, spec := range images() {
		img, dir, err := b.buildImage(spec)
		if err != nil {
			return err
		}
		d, err := img.Digest()
		if err != nil {
			return err
		}
		current = append(current, builtImage{Name: spec.name, Refs: spec.refs, Layout: dir, Digest: d.String()})
	}
	for _, spec := range indexes() {
		ii, dir, err := b.buildIndex(spec)
		if err != nil {
			return err
		}
		d, err := ii.Digest()
		if err != nil {
			return err
		}
		current = append(current, builtImage{Name: spec.name, Refs: spec.refs, Layout: dir, Digest: d.String(), Index: true})
	}
	data, err := json.MarshalIndent(current, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(out, "current.json"), append(data, '\n'))
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// over path, so a reader sees the old content or the new, never a part.
func writeFileAtomic(path string, data []byte) error {
	return writeAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomic is writeFileAtomic for content that write streams.
func writeAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
