package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// Annotations an OCI layout names its images with: containerd's holds a
// full reference, the OCI one a full reference or only a tag.
const (
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// importUnpackers bounds the layers of one import unpacked at a time.
const importUnpackers = 2

// ImportOptions tune Import.
type ImportOptions struct {
	// Pinned marks every imported image pinned: the kubelet's image GC
	// never removes it.
	Pinned bool
}

// Imported is one image an import stored.
type Imported struct {
	ID          string   `json:"id"` // the config digest
	RepoTags    []string `json:"repoTags,omitempty"`
	RepoDigests []string `json:"repoDigests,omitempty"`
	Pinned      bool     `json:"pinned,omitempty"`
}

// Import loads the images of an image archive read from r: a
// docker-archive as Docker before 25 saves it (manifest.json, <id>/layer.tar,
// <config>.json), an OCI image layout (index.json, blobs/), or both at once
// as Docker 25 and later save. Every blob is checked against its
// descriptor and every layer against the config's diff IDs; layers are
// unpacked by the same code as pulled ones. From a multi-platform index
// only the store's platform is read, so an archive that lacks the blobs
// of the other platforms imports fine.
//
// An import stores all of the archive's images or, on any failure,
// nothing. Tags named by the archive move to the imported images; an
// image the archive does not name is stored untagged, found by its ID.
func (s *Service) Import(ctx context.Context, r io.Reader, opts ImportOptions) ([]Imported, error) {
	start := time.Now()
	a, err := spoolArchive(ctx, r, s.root)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer a.close()
	plans, err := s.plan(a)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}

	var chains []string
	for _, p := range plans {
		for _, l := range p.layers {
			chains = append(chains, l.ChainID)
		}
	}
	s.pin(chains)
	// Layers unpacked for an import that then fails are collected here.
	defer s.unpin(chains)
	if err := s.unpackImported(ctx, a, plans); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	out, err := s.commitImport(plans, opts)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	for _, img := range out {
		s.log.Info("imported image", "id", img.ID, "tags", img.RepoTags, "pinned", img.Pinned, "duration", time.Since(start))
	}
	return out, nil
}

// importPlan is one image of an archive, checked and ready to store.
type importPlan struct {
	tags     []string // normalised
	digests  []string // normalised name@digest
	index    *v1.Descriptor
	indexRaw []byte
	manifest []byte
	mDigest  v1.Hash
	config   []byte
	cDigest  v1.Hash
	layers   []importLayer
}

type importLayer struct {
	layerRef
	src *member
}

// plan reads the archive's table of contents and checks everything but
// the layers' content.
func (s *Service) plan(a *archive) ([]*importPlan, error) {
	var plans []*importPlan
	if a.has("index.json") {
		p, err := s.planOCI(a)
		if err != nil {
			return nil, err
		}
		plans = p
	}
	if a.has("manifest.json") {
		p, err := planDockerArchive(a, plans)
		if err != nil {
			return nil, err
		}
		plans = p
	} else if len(plans) == 0 && !a.has("index.json") {
		if a.has("repositories") {
			return nil, fmt.Errorf("%w: it has no manifest.json: archives of Docker before 1.10 are not supported", ErrInvalidArchive)
		}
		return nil, fmt.Errorf("%w: it has neither index.json nor manifest.json, so it is no image archive", ErrInvalidArchive)
	}
	if len(plans) == 0 {
		return nil, fmt.Errorf("%w: it holds no image", ErrInvalidArchive)
	}
	return plans, nil
}

// planOCI reads an OCI image layout: every manifest index.json lists, and
// from each index among them the manifest of the store's platform.
func (s *Service) planOCI(a *archive) ([]*importPlan, error) {
	raw, _, err := a.readJSON("index.json")
	if err != nil {
		return nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: index.json: %w", ErrInvalidArchive, err)
	}
	var plans []*importPlan
	for _, desc := range idx.Manifests {
		tags, err := annotatedNames(desc.Annotations)
		if err != nil {
			return nil, err
		}
		var p *importPlan
		switch {
		case desc.MediaType.IsIndex():
			p, err = s.planIndex(a, desc)
		case desc.MediaType.IsImage():
			p, err = planManifest(a, desc)
		default:
			s.log.Info("import: skipping what is not an image", "digest", desc.Digest, "mediaType", desc.MediaType)
			continue
		}
		if err != nil {
			return nil, err
		}
		top := p.mDigest
		if p.index != nil {
			top = p.index.Digest
		}
		for _, t := range tags {
			ref, _ := ParseReference(t)
			if ref.Digest != "" {
				p.digests = addSorted(p.digests, ref.String())
				continue
			}
			p.tags = addSorted(p.tags, ref.String())
			p.digests = addSorted(p.digests, ref.WithDigest(top.String()).String())
		}
		plans = mergePlan(plans, p)
	}
	return plans, nil
}

// annotatedNames are the references a descriptor's annotations give the
// image. An OCI ref.name that is only a tag ("v1") names no repository,
// so it cannot name the image; a string with a '/', ':' or '@' is taken
// for a full reference, as ctr does.
func annotatedNames(ann map[string]string) ([]string, error) {
	name := ann[annotationImageName]
	if name == "" {
		name = ann[annotationRefName]
		if !strings.ContainsAny(name, "/:@") {
			return nil, nil
		}
	}
	if name == "" {
		return nil, nil
	}
	ref, err := ParseReference(name)
	if err != nil {
		return nil, fmt.Errorf("%w: image name %q: %w", ErrInvalidArchive, name, err)
	}
	return []string{ref.String()}, nil
}

// planIndex picks the store's platform from an index, as a pull does
// (choosePlatform).
func (s *Service) planIndex(a *archive, desc v1.Descriptor) (*importPlan, error) {
	raw, err := a.blobJSON(desc)
	if err != nil {
		return nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: index %s: %w", ErrInvalidArchive, desc.Digest, err)
	}
	child, err := choosePlatform(s.platform, idx.Manifests)
	if err != nil {
		return nil, fmt.Errorf("%w: index %s: %w", ErrInvalidArchive, desc.Digest, err)
	}
	plan, err := planManifest(a, child)
	if err != nil {
		return nil, fmt.Errorf("%s of index %s: %w", platformString(s.platform), desc.Digest, err)
	}
	plan.index, plan.indexRaw = &desc, raw
	return plan, nil
}

// planManifest reads an image manifest of the layout and checks its
// config and the presence, digest and size of its layers.
func planManifest(a *archive, desc v1.Descriptor) (*importPlan, error) {
	raw, err := a.blobJSON(desc)
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: manifest %s: %w", ErrInvalidArchive, desc.Digest, err)
	}
	cfg, err := a.blobJSON(m.Config)
	if err != nil {
		return nil, fmt.Errorf("config of manifest %s: %w", desc.Digest, err)
	}
	var srcs []importLayer
	for _, l := range m.Layers {
		if !slices.Contains(layerMediaTypes, l.MediaType) {
			return nil, fmt.Errorf("%w: layer %s has media type %q, which is not a layer", ErrInvalidArchive, l.Digest, l.MediaType)
		}
		src, err := a.blob(l)
		if err != nil {
			return nil, fmt.Errorf("layer of manifest %s: %w", desc.Digest, err)
		}
		srcs = append(srcs, importLayer{layerRef: layerRef{Digest: l.Digest.String(), Size: l.Size, MediaType: string(l.MediaType)}, src: src})
	}
	p, err := newPlan(cfg, m.Config.Digest, srcs)
	if err != nil {
		return nil, err
	}
	p.manifest, p.mDigest = raw, desc.Digest
	return p, nil
}

// newPlan checks an image's config against its layers and gives each
// layer its diff and chain IDs.
func newPlan(cfgRaw []byte, cfgDigest v1.Hash, layers []importLayer) (*importPlan, error) {
	cfg, err := v1.ParseConfigFile(bytes.NewReader(cfgRaw))
	if err != nil {
		return nil, fmt.Errorf("%w: config %s: %w", ErrInvalidArchive, cfgDigest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(layers) {
		return nil, fmt.Errorf("%w: config %s lists %d layers, the image has %d", ErrInvalidArchive, cfgDigest, len(cfg.RootFS.DiffIDs), len(layers))
	}
	diffIDs := make([]string, len(layers))
	for i, d := range cfg.RootFS.DiffIDs {
		if d.Algorithm != "sha256" || len(d.Hex) != 64 || !isHex(d.Hex) {
			return nil, fmt.Errorf("%w: config %s: diff ID %q: only sha256 digests are supported", ErrInvalidArchive, cfgDigest, d)
		}
		diffIDs[i] = d.String()
	}
	chains := chainIDs(diffIDs)
	for i := range layers {
		layers[i].DiffID, layers[i].ChainID = diffIDs[i], chains[i]
	}
	return &importPlan{config: cfgRaw, cDigest: cfgDigest, layers: layers}, nil
}

// digestName matches the member names that say their content's digest:
// blobs/sha256/<hex> (Docker 25 and later, OCI), <hex>.json (Docker's
// configs), sha256:<hex> (go-containerregistry's tarball).
var digestName = regexp.MustCompile(`(?:^|/)(?:sha256:)?([a-f0-9]{64})(?:\.json)?$`)

// planDockerArchive reads manifest.json, the table of a docker-archive.
// An entry whose config an OCI plan already has only adds its tags.
func planDockerArchive(a *archive, plans []*importPlan) ([]*importPlan, error) {
	raw, _, err := a.readJSON("manifest.json")
	if err != nil {
		return nil, err
	}
	var entries tarball.Manifest
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("%w: manifest.json: %w", ErrInvalidArchive, err)
	}
	for _, e := range entries {
		var tags []string
		for _, t := range e.RepoTags {
			ref, err := ParseReference(t)
			if err != nil || ref.Tag == "" {
				return nil, fmt.Errorf("%w: manifest.json: repo tag %q is not a tag reference", ErrInvalidArchive, t)
			}
			tags = append(tags, ref.String())
		}
		cfgRaw, cm, err := a.readJSON(e.Config)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", e.Config, err)
		}
		if err := checkNamedDigest(e.Config, cm); err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(plans, func(p *importPlan) bool { return p.cDigest == cm.digest }); i >= 0 {
			for _, t := range tags {
				plans[i].tags = addSorted(plans[i].tags, t)
			}
			continue
		}
		var srcs []importLayer
		for _, name := range e.Layers {
			m, err := a.member(name)
			if err != nil {
				return nil, err
			}
			if m == nil {
				return nil, fmt.Errorf("%w: it lacks layer %s", ErrInvalidArchive, name)
			}
			if err := checkNamedDigest(name, m); err != nil {
				return nil, err
			}
			mt, err := sniffLayer(a, m)
			if err != nil {
				return nil, err
			}
			srcs = append(srcs, importLayer{layerRef: layerRef{Digest: m.digest.String(), Size: m.size, MediaType: string(mt)}, src: m})
		}
		p, err := newPlan(cfgRaw, cm.digest, srcs)
		if err != nil {
			return nil, err
		}
		if err := p.synthesizeManifest(); err != nil {
			return nil, err
		}
		p.tags = slices.Compact(slices.Sorted(slices.Values(tags)))
		plans = mergePlan(plans, p)
	}
	return plans, nil
}

// checkNamedDigest refuses a member whose name states a digest its
// content does not have.
func checkNamedDigest(name string, m *member) error {
	sub := digestName.FindStringSubmatch(name)
	if sub == nil || sub[1] == m.digest.Hex {
		return nil
	}
	return fmt.Errorf("%w: %s has content of digest %s", ErrInvalidArchive, name, m.digest)
}

// sniffLayer tells the media type of a docker-archive layer, which its
// manifest.json does not say: Docker's are plain tars, other tools'
// sometimes compressed.
func sniffLayer(a *archive, m *member) (types.MediaType, error) {
	magic := make([]byte, 4)
	n, err := a.f.ReadAt(magic, m.off)
	if err != nil && (!errors.Is(err, io.EOF) || int64(n) < min(m.size, 4)) {
		return "", fmt.Errorf("read layer %s from the import spool: %w", m.name, err)
	}
	magic = magic[:min(int64(n), m.size)]
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		return types.DockerLayer, nil
	case bytes.HasPrefix(magic, zstdMagic):
		return types.OCILayerZStd, nil
	}
	return types.DockerUncompressedLayer, nil
}

// synthesizeManifest gives a docker-archive image, which has none, the
// manifest a registry would serve for it, so that every image of the
// store has one.
func (p *importPlan) synthesizeManifest() error {
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.DockerManifestSchema2,
		Config:        v1.Descriptor{MediaType: types.DockerConfigJSON, Size: int64(len(p.config)), Digest: p.cDigest},
	}
	for _, l := range p.layers {
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.MediaType(l.MediaType), Size: l.Size, Digest: l.src.digest})
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	d, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	p.manifest, p.mDigest = raw, d
	return nil
}

// mergePlan adds p to plans, or only its names where an image of the same
// config is planned already (an archive lists an image once per tag).
func mergePlan(plans []*importPlan, p *importPlan) []*importPlan {
	i := slices.IndexFunc(plans, func(q *importPlan) bool { return q.cDigest == p.cDigest })
	if i < 0 {
		return append(plans, p)
	}
	for _, t := range p.tags {
		plans[i].tags = addSorted(plans[i].tags, t)
	}
	for _, d := range p.digests {
		plans[i].digests = addSorted(plans[i].digests, d)
	}
	return plans
}

// unpackImported unpacks the layers the store lacks, each once, with the
// pull path's unpacker: the same checks (sizes, diff IDs, paths that
// escape, links out, overlay xattrs) refuse the same hostile layers.
func (s *Service) unpackImported(ctx context.Context, a *archive, plans []*importPlan) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(importUnpackers)
	seen := map[string]bool{}
	for _, p := range plans {
		for _, l := range p.layers {
			if seen[l.ChainID] || s.hasLayer(l.ChainID) {
				continue
			}
			seen[l.ChainID] = true
			g.Go(func() error {
				err := doErr(gctx, &s.flights, l.ChainID, func(ctx context.Context) error {
					if s.hasLayer(l.ChainID) {
						return nil
					}
					return s.unpackLayer(ctx, a.reader(l.src), l.layerRef)
				})
				switch {
				case err == nil:
					return nil
				case gctx.Err() != nil, errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EIO), errors.Is(err, syscall.EROFS):
					return fmt.Errorf("layer %s (%s): %w", l.DiffID, l.src.name, err)
				}
				// Anything else is the layer's content: refused as a pull
				// refuses it, and the archive with it.
				return fmt.Errorf("%w: layer %s (%s): %w", ErrInvalidArchive, l.DiffID, l.src.name, err)
			})
		}
	}
	return g.Wait()
}

// commitImport stores the small blobs, then every image record at once.
func (s *Service) commitImport(plans []*importPlan, opts ImportOptions) ([]Imported, error) {
	for _, p := range plans {
		if p.index != nil {
			if err := s.content.put(p.index.Digest, p.indexRaw); err != nil {
				return nil, err
			}
		}
		if err := s.content.put(p.mDigest, p.manifest); err != nil {
			return nil, err
		}
		if err := s.content.put(p.cDigest, p.config); err != nil {
			return nil, err
		}
	}
	now := time.Now().UTC()

	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.editLocked()
	for _, p := range plans {
		id := p.cDigest.String()
		img := e.image(id)
		if img == nil {
			img = &imageRecord{
				ID:             id,
				ManifestDigest: p.mDigest.String(),
				ManifestSize:   int64(len(p.manifest)),
				ConfigSize:     int64(len(p.config)),
				Size:           int64(len(p.config)),
			}
			if p.index != nil {
				img.IndexDigest, img.IndexSize = p.index.Digest.String(), int64(len(p.indexRaw))
			}
			for _, l := range p.layers {
				img.Layers = append(img.Layers, l.layerRef)
				img.Size += l.Size
			}
			if err := img.setConfig(p.config); err != nil {
				return nil, err
			}
			e.add(img)
		}
		img.Pulled = now
		img.Pinned = img.Pinned || opts.Pinned
		for _, d := range p.digests {
			img.RepoDigests = addSorted(img.RepoDigests, d)
		}
		for _, t := range p.tags {
			e.tag(t, id)
		}
	}
	if err := e.commit(); err != nil {
		s.dropUnusedBlobsLocked(plans)
		return nil, err
	}
	out := make([]Imported, len(plans))
	for i, p := range plans {
		v := s.viewLocked(s.images[p.cDigest.String()])
		out[i] = Imported{ID: v.ID, RepoTags: slices.Clone(p.tags), RepoDigests: slices.Clone(p.digests), Pinned: v.Pinned}
	}
	return out, nil
}

// dropUnusedBlobsLocked removes the blobs a failed import stored that no
// image uses.
func (s *Service) dropUnusedBlobsLocked(plans []*importPlan) {
	used := map[v1.Hash]bool{}
	for _, img := range s.images {
		for _, d := range img.blobs() {
			used[d] = true
		}
	}
	for _, p := range plans {
		for _, d := range []v1.Hash{p.mDigest, p.cDigest} {
			if !used[d] {
				s.content.remove(d)
			}
		}
		if p.index != nil && !used[p.index.Digest] {
			s.content.remove(p.index.Digest)
		}
	}
}
