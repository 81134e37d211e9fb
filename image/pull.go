package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/tracing"
)

const userAgent = "berth"

// Registries are retried briefly: the kubelet retries a failed pull with
// its own back-off, and a mirror that fails should hand over to the next
// endpoint quickly.
var retryBackoff = remote.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 3}

// Pull fetches the image ref names into the store and returns its ID (the
// config digest). The image's mirrors are tried in order, then its
// registry. A pull either stores the whole image or, on any failure,
// nothing: layers it unpacked are collected again.
//
// Concurrent pulls of one reference with the same credentials share one
// run: one manifest resolution, one download. A caller that gives up
// leaves the run to the others; it is cancelled when all have.
func (s *Service) Pull(ctx context.Context, refStr string, auth *AuthConfig) (string, error) {
	ref, err := ParseReference(refStr)
	if err != nil {
		return "", err
	}
	id, err := s.pulls.do(ctx, ref.String()+"\x00"+auth.fingerprint(), func(ctx context.Context) (string, error) {
		return s.pull(ctx, ref, auth)
	})
	if err != nil && ctx.Err() != nil {
		return "", fmt.Errorf("pull %s: %w", ref, context.Cause(ctx))
	}
	return id, err
}

// pull is one run of Pull.
func (s *Service) pull(ctx context.Context, ref Reference, auth *AuthConfig) (id string, err error) {
	// The first caller's trace gets the spans of a pull that several
	// share: the tracer comes with its context.
	ctx, span := tracing.FromContext(ctx).Start(ctx, "image pull", trace.WithAttributes(tracing.Image.String(ref.String())))
	defer func() { tracing.End(span, err) }()
	t := s.trackPull(ref.String())
	stop := make(chan struct{})
	go s.logProgress(t, stop)
	defer func() {
		close(stop)
		s.endPull(ctx, t, err)
	}()
	// Layers unpacked from an endpoint that then failed stay pinned until
	// the pull ends, so that the next endpoint reuses them.
	var pinned []string
	defer func() { s.unpin(pinned) }()
	eps, err := s.regs.endpoints(ref, auth)
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	var errs []error
	for _, ep := range eps {
		start := time.Now()
		id, err := s.pullFrom(ctx, ref, ep, &pinned, t)
		if err == nil {
			s.log.Info("pulled image", "ref", ref.String(), "from", ep.String(), "id", id, "duration", time.Since(start))
			return id, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("pull %s: %w", ref, ctx.Err())
		}
		s.log.Warn("pull failed", "ref", ref.String(), "from", ep.String(), "error", err)
		errs = append(errs, fmt.Errorf("from %s: %w", ep, err))
	}
	return "", pullError(ref, errs)
}

// pullError wraps one sentinel that describes the failure as a whole:
// not found only if no endpoint had the image, unauthorized if the
// registry itself refused us.
func pullError(ref Reference, errs []error) error {
	msgs := make([]string, len(errs))
	allNotFound := true
	for i, err := range errs {
		msgs[i] = err.Error()
		if !errors.Is(err, ErrNotFound) {
			allNotFound = false
		}
	}
	detail := strings.Join(msgs, "; ")
	last := errs[len(errs)-1]
	switch {
	case allNotFound:
		return fmt.Errorf("pull %s: %w: %s", ref, ErrNotFound, detail)
	case errors.Is(last, ErrUnauthorized):
		return fmt.Errorf("pull %s: %w: %s", ref, ErrUnauthorized, detail)
	case errors.Is(last, ErrStalled):
		return fmt.Errorf("pull %s: %w: %s", ref, ErrStalled, detail)
	case errors.Is(last, syscall.ENOSPC) || errors.Is(last, syscall.EDQUOT):
		// The node's disk is full, whichever endpoint it was: kept in the
		// chain so that the caller can report it by its code.
		return fmt.Errorf("pull %s: %s%w", ref, strings.TrimSuffix(detail, last.Error()), last)
	}
	return fmt.Errorf("pull %s: %s", ref, detail)
}

// classify marks registry answers that mean "no such thing" or "not
// allowed" with the package's sentinels, keeping the original error.
func classify(err error) error {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return err
	}
	switch terr.StatusCode {
	case http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	for _, d := range terr.Errors {
		switch d.Code {
		case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
			return fmt.Errorf("%w: %w", ErrUnauthorized, err)
		}
	}
	return err
}

var layerMediaTypes = []types.MediaType{
	types.DockerLayer, types.DockerUncompressedLayer, types.DockerForeignLayer,
	types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer,
	types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer,
}

// pulled is what one successful fetch brings, before it is committed.
type pulled struct {
	top       *remote.Descriptor // what the reference resolved to: an index or a manifest
	manifest  []byte
	mDigest   v1.Hash
	config    []byte
	configDig v1.Hash
	layers    []layerRef
}

func (s *Service) pullFrom(ctx context.Context, ref Reference, ep endpoint, pinned *[]string, t *pullTracker) (string, error) {
	gref, err := ref.on(ep.host, ep.insecure)
	if err != nil {
		return "", err
	}
	puller, err := remote.NewPuller(
		remote.WithTransport(s.endpointTransport(ep)),
		remote.WithAuth(ep.auth),
		remote.WithUserAgent(userAgent),
		remote.WithRetryBackoff(retryBackoff),
	)
	if err != nil {
		return "", err
	}
	tracer := tracing.FromContext(ctx)
	rctx, span := tracer.Start(ctx, "image manifest", trace.WithAttributes(attribute.String("endpoint", ep.String())))
	p, err := s.resolve(rctx, puller, gref.String(), ref, ep)
	tracing.End(span, err)
	if err != nil {
		return "", err
	}

	s.setLayers(t, p.layers)
	chains := make([]string, len(p.layers))
	for i, l := range p.layers {
		chains[i] = l.ChainID
	}
	s.pin(chains)
	*pinned = append(*pinned, chains...)

	blobs := s.blobClient(ctx, ep, gref.Context())
	g, gctx := errgroup.WithContext(ctx)
	for _, l := range p.layers {
		if s.hasLayer(l.ChainID) {
			continue
		}
		g.Go(func() error {
			ctx, span := tracer.Start(gctx, "layer fetch and unpack", trace.WithAttributes(
				attribute.String("layer", l.Digest), attribute.Int64("size", l.Size)))
			err := s.fetchLayer(ctx, blobs, l)
			tracing.End(span, err)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	s.faults.Hit(faultpoint.PullLayersCommitted, ref.String())
	return s.commitImage(ref, p)
}

// blobClient makes, on first use, the client layer downloads of one pull
// from ep go through: authenticated for pulls from repo (go-containerregistry's
// token handshake), over the endpoint's stall-guarded transport.
func (s *Service) blobClient(ctx context.Context, ep endpoint, repo name.Repository) func() (*blobSource, error) {
	return sync.OnceValues(func() (*blobSource, error) {
		auth := ep.auth
		if auth == nil {
			auth = authn.Anonymous
		}
		rt, err := transport.NewWithContext(ctx, repo.Registry, auth,
			transport.NewUserAgent(s.endpointTransport(ep), userAgent), []string{repo.Scope(transport.PullScope)})
		if err != nil {
			return nil, fmt.Errorf("registry %s: %w", ep, classify(err))
		}
		return &blobSource{
			client: &http.Client{Transport: rt},
			base:   repo.Registry.Scheme() + "://" + repo.RegistryStr() + "/v2/" + repo.RepositoryStr() + "/blobs/",
		}, nil
	})
}

// blobSource is where one pull's layers come from.
type blobSource struct {
	client *http.Client
	base   string // URL of the repository's blobs, with a trailing /
}

// resolve fetches and checks the manifest (choosing the platform from an
// index) and the config.
func (s *Service) resolve(ctx context.Context, puller *remote.Puller, where string, ref Reference, ep endpoint) (*pulled, error) {
	gref, err := ref.on(ep.host, ep.insecure)
	if err != nil {
		return nil, err
	}
	desc, err := puller.Get(ctx, gref)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", classify(err))
	}
	switch mt := desc.MediaType; {
	case mt.IsIndex(), mt.IsImage():
	case mt.IsSchema1():
		return nil, fmt.Errorf("%s is a Docker schema 1 manifest, which is not supported", where)
	default:
		return nil, fmt.Errorf("%s has media type %q, which is not an image", where, mt)
	}
	img, err := s.platformImage(desc)
	if err != nil {
		return nil, err
	}
	p := &pulled{top: desc}
	if p.manifest, err = img.RawManifest(); err != nil {
		return nil, fmt.Errorf("manifest: %w", classify(err))
	}
	if p.mDigest, err = img.Digest(); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	m, err := v1.ParseManifest(bytes.NewReader(p.manifest))
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Config.Size > maxDocument || m.Config.Size < 0 {
		return nil, fmt.Errorf("config %s: the manifest says %d bytes, more than berth's limit of %d", m.Config.Digest, m.Config.Size, maxDocument)
	}
	if p.config, err = img.RawConfigFile(); err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, classify(err))
	}
	p.configDig = m.Config.Digest
	cfg, err := v1.ParseConfigFile(bytes.NewReader(p.config))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("config lists %d layers, manifest %d", len(cfg.RootFS.DiffIDs), len(m.Layers))
	}
	diffIDs := make([]string, len(m.Layers))
	for i, d := range cfg.RootFS.DiffIDs {
		diffIDs[i] = d.String()
	}
	chains := chainIDs(diffIDs)
	for i, l := range m.Layers {
		if !slices.Contains(layerMediaTypes, l.MediaType) {
			return nil, fmt.Errorf("layer %s has media type %q, which is not a layer", l.Digest, l.MediaType)
		}
		if l.Digest.Algorithm != "sha256" || cfg.RootFS.DiffIDs[i].Algorithm != "sha256" {
			return nil, fmt.Errorf("layer %s: only sha256 digests are supported", l.Digest)
		}
		p.layers = append(p.layers, layerRef{
			ChainID:   chains[i],
			DiffID:    diffIDs[i],
			Digest:    l.Digest.String(),
			Size:      l.Size,
			MediaType: string(l.MediaType),
		})
	}
	return p, nil
}

// platformImage is the image desc names: itself, or the host's from an
// index (choosePlatform, as an import chooses).
func (s *Service) platformImage(desc *remote.Descriptor) (v1.Image, error) {
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", classify(err))
		}
		return img, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("index: %w", classify(err))
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("index: %w", classify(err))
	}
	child, err := choosePlatform(s.platform, im.Manifests)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	img, err := idx.Image(child.Digest)
	if err != nil {
		return nil, fmt.Errorf("platform %s, manifest %s: %w", platformString(s.platform), child.Digest, classify(err))
	}
	return img, nil
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// commitImage stores the manifest and config, then records the image and
// moves ref's tag onto it.
func (s *Service) commitImage(ref Reference, p *pulled) (string, error) {
	var indexDigest string
	var indexSize int64
	if p.top.MediaType.IsIndex() {
		if err := s.content.put(p.top.Digest, p.top.Manifest); err != nil {
			return "", err
		}
		indexDigest, indexSize = p.top.Digest.String(), int64(len(p.top.Manifest))
	}
	if err := s.content.put(p.mDigest, p.manifest); err != nil {
		return "", err
	}
	if err := s.content.put(p.configDig, p.config); err != nil {
		return "", err
	}
	id := p.configDig.String()

	// The digest the reference was resolved through is the one users
	// pin: the index digest for a multi-platform image.
	repoDigest := ref.WithDigest(p.top.Digest.String()).String()
	if ref.Digest != "" {
		repoDigest = ref.String()
	}
	s.faults.Hit(faultpoint.PullContentStored, ref.String())

	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.editLocked()
	img := e.image(id)
	if img == nil {
		img = &imageRecord{
			ID:             id,
			ManifestDigest: p.mDigest.String(),
			ManifestSize:   int64(len(p.manifest)),
			IndexDigest:    indexDigest,
			IndexSize:      indexSize,
			ConfigSize:     int64(len(p.config)),
			Layers:         p.layers,
			Size:           int64(len(p.config)),
		}
		for _, l := range p.layers {
			img.Size += l.Size
		}
		if err := img.setConfig(p.config); err != nil {
			return "", err
		}
		e.add(img)
	}
	img.Pulled = time.Now().UTC()
	img.RepoDigests = addSorted(img.RepoDigests, repoDigest)
	if ref.Tag != "" {
		e.tag(ref.String(), id)
	}
	if err := e.commit(); err != nil {
		return "", err
	}
	return id, nil
}

func addSorted(list []string, v string) []string {
	if slices.Contains(list, v) {
		return slices.Clone(list)
	}
	out := append(slices.Clone(list), v)
	slices.Sort(out)
	return out
}
