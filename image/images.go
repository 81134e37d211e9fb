package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth-runtime/berth/internal/idindex"
)

// Image is what the service tells about one stored image.
type Image struct {
	ID             string // config digest, sha256:...
	RepoTags       []string
	RepoDigests    []string
	ManifestDigest string
	Size           int64 // compressed layers plus config, as the registry serves them
	// UID is set when the config's User is numeric; Username when it is a
	// name. Neither is set for an image that does not say.
	UID      *int64
	Username string
	Pinned   bool
	Config   []byte // the image config JSON
	Layers   []Layer
	Pulled   time.Time
}

// Layer is one unpacked layer of an image.
type Layer struct {
	ChainID string
	DiffID  string
	Digest  string
	Dir     string // an overlay lowerdir
}

// LowerDirs lists the layer directories top layer first, the order
// overlayfs wants in its lowerdir option.
func (img Image) LowerDirs() []string {
	dirs := make([]string, 0, len(img.Layers))
	for i := len(img.Layers) - 1; i >= 0; i-- {
		dirs = append(dirs, img.Layers[i].Dir)
	}
	return dirs
}

func (img *imageRecord) setConfig(raw []byte) error {
	var cfg struct {
		Config struct {
			User string
		} `json:"config"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("decode config of %s: %w", img.ID, err)
	}
	img.config = raw
	img.user = cfg.Config.User
	return nil
}

// parseUser splits an image config User (uid, name, uid:gid, name:gid).
func parseUser(user string) (*int64, string) {
	u, _, _ := strings.Cut(user, ":")
	if u == "" {
		return nil, ""
	}
	if n, err := strconv.ParseInt(u, 10, 64); err == nil && n >= 0 {
		return &n, ""
	}
	return nil, u
}

// addImageLocked indexes img under its ID, tags and digests.
func (s *Service) addImageLocked(img *imageRecord) {
	s.images[img.ID] = img
	for _, r := range img.RepoTags {
		s.refs[r] = img.ID
	}
	for _, r := range img.RepoDigests {
		s.refs[r] = img.ID
		// The platform manifest's digest names the image as well as the
		// index digest it was pulled by.
		if name, _, ok := strings.Cut(r, "@"); ok && img.ManifestDigest != "" {
			s.refs[name+"@"+img.ManifestDigest] = img.ID
		}
	}
}

func (s *Service) dropRefsLocked(img *imageRecord) {
	for r, id := range s.refs {
		if id == img.ID {
			delete(s.refs, r)
		}
	}
}

// resolveLocked finds the image a user's string names: a full image ID
// (with or without sha256:), a tag or digest reference, or an unambiguous
// prefix of an image ID as crictl prints them.
func (s *Service) resolveLocked(name string) (*imageRecord, error) {
	if hex, ok := strings.CutPrefix(name, "sha256:"); ok && isHex(hex) {
		if img := s.images[name]; img != nil {
			return img, nil
		}
		return s.byIDPrefixLocked(hex, name)
	}
	if isHex(name) && len(name) == 64 {
		if img := s.images["sha256:"+name]; img != nil {
			return img, nil
		}
	}
	ref, perr := ParseReference(name)
	if perr == nil {
		if id, ok := s.refs[ref.String()]; ok {
			return s.images[id], nil
		}
	}
	if isHex(name) && len(name) >= 4 {
		return s.byIDPrefixLocked(name, name)
	}
	if perr != nil {
		return nil, perr
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
}

// byIDPrefixLocked finds the image whose ID begins with sha256:hex. A
// prefix of several IDs is an error naming them, not ErrNotFound: Remove
// must not take it for an image that is gone, nor ImageStatus tell the
// kubelet to pull.
func (s *Service) byIDPrefixLocked(hex, name string) (*imageRecord, error) {
	_, img, err := idindex.Find(maps.All(s.images), "sha256:"+hex)
	if errors.Is(err, idindex.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	var amb *idindex.AmbiguousError
	if errors.As(err, &amb) {
		amb.Prefix = name // as the user typed it, without the sha256: it may lack
	}
	if err != nil {
		return nil, fmt.Errorf("image %w", err)
	}
	return img, nil
}

func isHex(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdef") == ""
}

func (s *Service) viewLocked(img *imageRecord) Image {
	uid, username := parseUser(img.user)
	v := Image{
		ID:             img.ID,
		RepoTags:       slices.Clone(img.RepoTags),
		RepoDigests:    slices.Clone(img.RepoDigests),
		ManifestDigest: img.ManifestDigest,
		Size:           img.Size,
		UID:            uid,
		Username:       username,
		Config:         img.config,
		Pulled:         img.Pulled,
		Pinned:         img.Pinned || s.pinned[img.ID],
	}
	for _, r := range slices.Concat(img.RepoTags, img.RepoDigests) {
		if s.pinned[r] {
			v.Pinned = true
		}
	}
	for _, l := range img.Layers {
		v.Layers = append(v.Layers, Layer{ChainID: l.ChainID, DiffID: l.DiffID, Digest: l.Digest, Dir: s.layerPath(l.ChainID)})
	}
	return v
}

// Status describes the image name refers to (see resolveLocked for the
// accepted forms). A missing image is ErrNotFound.
func (s *Service) Status(name string) (Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := s.resolveLocked(name)
	if err != nil {
		return Image{}, err
	}
	return s.viewLocked(img), nil
}

// List describes every image, or only the one filter names when filter is
// not empty (none if it names nothing), ordered by ID.
func (s *Service) List(filter string) []Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	if filter != "" {
		img, err := s.resolveLocked(filter)
		if err != nil {
			return nil
		}
		return []Image{s.viewLocked(img)}
	}
	out := make([]Image, 0, len(s.images))
	for _, img := range s.images {
		out = append(out, s.viewLocked(img))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
