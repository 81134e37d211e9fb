package image

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/store"
)

const (
	// DefaultStallTimeout: how long a registry may send nothing before a
	// pull fails.
	DefaultStallTimeout = time.Minute
	// DefaultMaxConcurrentDownloads bounds layer downloads across all pulls.
	DefaultMaxConcurrentDownloads = 3

	tempPrefix = ".tmp-"
)

// Options configure a Service.
type Options struct {
	// Root holds everything the service stores (see the package comment).
	Root string
	// Registries maps a registry host to its mirrors, security and
	// credentials.
	Registries map[string]RegistryHost
	// RegistryConfigPath is a directory of containerd-style registry host
	// configurations (<host>/hosts.toml, _default/hosts.toml), read on
	// every pull; empty reads none. See hosts.go.
	RegistryConfigPath string
	// StallTimeout: zero means DefaultStallTimeout, negative disables it.
	StallTimeout time.Duration
	// MaxConcurrentDownloads: zero means DefaultMaxConcurrentDownloads.
	MaxConcurrentDownloads int
	// PinnedImages are references (or image IDs) reported as pinned,
	// which the kubelet then never garbage-collects: the pause image and
	// the pinned_images key. An image's own record can also say it is
	// pinned (Import with Pinned).
	PinnedImages []string
	// Platform picked from a multi-platform index (see choosePlatform);
	// zero means HostPlatform.
	Platform v1.Platform
	Logger   *slog.Logger
	// Metrics records pulls; nil records nothing.
	Metrics *Metrics
	// BootID names this boot of the machine; empty reads the kernel's.
	// Tests set it to play a reboot.
	BootID string
	// Faults hangs a pull at a named step for crash tests; nil in
	// production.
	Faults *faultpoint.Point
}

// Service is the image store and puller. Every query is answered from
// memory; disk is written only when something changes.
type Service struct {
	log      *slog.Logger
	faults   *faultpoint.Point
	root     string
	layerDir string
	platform v1.Platform
	regs     *registries
	pinned   map[string]bool // normalised references and image IDs

	secure, insecure http.RoundTripper // stall-guarded connection pools
	downloads        chan struct{}     // semaphore over layer downloads
	flights          flights[struct{}] // layer downloads and unpacks, by chain ID
	pulls            flights[string]   // whole pulls, by reference and credentials
	progress         pullSet
	flush            flusher
	bootID           string // "" if unknown: layers are flushed before they are published
	syncMode         int    // how a layer is made durable (sync.go); syncDeferred but in benchmarks
	metrics          *Metrics

	content    *contentStore
	imageRecs  *store.Records[imageRecord]
	layerRecs  *store.Records[layerRecord]
	leaseRecs  *store.Records[leaseRecord]
	mountpoint string

	mu     sync.Mutex
	images map[string]*imageRecord // by image ID
	refs   map[string]string       // normalised tag or digest reference → image ID
	layers map[string]*layerRecord // by chain ID
	pins   map[string]int          // chain ID → pulls in progress needing it
	leases map[string]*leaseRecord // by holder
	// foreign: some record is of a format version this berth cannot
	// read (a newer berth's, see store.VersionError). What it holds is
	// unknown, so nothing is garbage-collected while it is there.
	foreign bool
}

type imageRecord struct {
	ID             string // config digest
	RepoTags       []string
	RepoDigests    []string
	ManifestDigest string
	ManifestSize   int64
	IndexDigest    string `json:",omitempty"`
	IndexSize      int64  `json:",omitempty"`
	ConfigSize     int64
	Layers         []layerRef // bottom first
	Size           int64
	Pulled         time.Time
	// Pinned images are never garbage-collected by the kubelet; the flag
	// stays until the image is removed.
	Pinned bool `json:",omitempty"`

	config []byte // raw config JSON, kept in memory for status queries
	user   string
}

type layerRef struct {
	ChainID   string
	DiffID    string
	Digest    string
	Size      int64 // compressed, as in the manifest
	MediaType string
}

type layerRecord struct {
	ChainID string
	DiffID  string
	Digest  string
	Usage   int64 // bytes of disk used by the unpacked layer
	Inodes  int64
	// PendingBoot: the layer is published but not yet flushed, on this
	// boot ID (sync.go); "" once it is durable.
	PendingBoot string `json:",omitempty"`
}

type leaseRecord struct {
	Holder  string
	ImageID string
	Layers  []string // chain IDs
}

// New opens the store under opts.Root, creating it if needed, and brings
// it to a clean state: unfinished work from a previous run is deleted and
// layers nothing refers to are collected.
func New(ctx context.Context, opts Options) (*Service, error) {
	if opts.Root == "" {
		return nil, errors.New("image service: no root directory")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	regs, err := newRegistries(opts.Registries)
	if err != nil {
		return nil, fmt.Errorf("registry configuration: %w", err)
	}
	stall := opts.StallTimeout
	if stall == 0 {
		stall = DefaultStallTimeout
	}
	regs.useHostsDir(opts.RegistryConfigPath, log.With("component", "image"), stall)
	downloads := opts.MaxConcurrentDownloads
	if downloads <= 0 {
		downloads = DefaultMaxConcurrentDownloads
	}
	platform := normalizePlatform(opts.Platform)
	if opts.Platform.OS == "" {
		platform = HostPlatform()
	}
	s := &Service{
		log:       log.With("component", "image"),
		faults:    opts.Faults,
		metrics:   opts.Metrics,
		root:      opts.Root,
		layerDir:  filepath.Join(opts.Root, "layers"),
		platform:  platform,
		regs:      regs,
		pinned:    map[string]bool{},
		secure:    &stallTransport{inner: newHTTPTransport(false), timeout: stall},
		insecure:  &stallTransport{inner: newHTTPTransport(true), timeout: stall},
		downloads: make(chan struct{}, downloads),
		images:    map[string]*imageRecord{},
		refs:      map[string]string{},
		layers:    map[string]*layerRecord{},
		pins:      map[string]int{},
		leases:    map[string]*leaseRecord{},
		bootID:    cmp.Or(opts.BootID, bootID()),
		flush:     flusher{kick: make(chan struct{}, 1)},
	}
	for _, p := range opts.PinnedImages {
		if hex, ok := strings.CutPrefix(p, "sha256:"); ok && len(hex) == 64 && isHex(hex) {
			s.pinned[p] = true
			continue
		}
		ref, err := ParseReference(p)
		if err != nil {
			return nil, fmt.Errorf("pinned image: %w", err)
		}
		s.pinned[ref.String()] = true
	}
	// Root's only, also when an older berth made it searchable: the
	// layers are shared by every container of an image, and their
	// world-writable dirs (/tmp) would let any host user plant files in
	// all of them. Overlay reaches them as the mounter, root.
	if err := os.MkdirAll(s.layerDir, 0o700); err != nil {
		return nil, fmt.Errorf("create layer store: %w", err)
	}
	if err := os.Chmod(s.layerDir, 0o700); err != nil {
		return nil, fmt.Errorf("layer store %s: %w", s.layerDir, err)
	}
	if s.content, err = newContentStore(filepath.Join(opts.Root, "content", "sha256")); err != nil {
		return nil, err
	}
	if s.imageRecs, err = store.Open[imageRecord](filepath.Join(opts.Root, "images")); err != nil {
		return nil, err
	}
	if s.layerRecs, err = store.Open[layerRecord](filepath.Join(opts.Root, "layer-records")); err != nil {
		return nil, err
	}
	// A lease lives as long as its holder, a container, and containers do
	// not survive a reboot: lease records need no fsync (after a power cut
	// the container service releases the leases of containers that are
	// gone). It is written on every CreateContainer, under the image lock.
	if s.leaseRecs, err = store.Open[leaseRecord](filepath.Join(opts.Root, "leases"), store.Volatile); err != nil {
		return nil, err
	}
	if s.mountpoint, err = mountpointOf(opts.Root); err != nil {
		return nil, err
	}
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	// A berth killed on this boot before flushing: the page cache holds
	// the files whole, so flushing them now makes them durable.
	for _, l := range s.layers {
		if l.PendingBoot != "" {
			s.flushLater(l)
		}
	}
	return s, nil
}

func (s *Service) transport(insecure bool) http.RoundTripper {
	if insecure {
		return s.insecure
	}
	return s.secure
}

// Root is the directory the service stores everything under.
func (s *Service) Root() string { return s.root }

// layerPath is the directory of an unpacked layer.
func (s *Service) layerPath(chainID string) string {
	return filepath.Join(s.layerDir, digestHex(chainID))
}

func digestHex(d string) string {
	if h, err := v1.NewHash(d); err == nil {
		return h.Hex
	}
	return d
}
