package image

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is how references to Docker Hub are spelled in repo tags and
// digests, matching what the kubelet and other runtimes report.
const dockerHub = "docker.io"

// Reference is a normalised image reference: busybox becomes
// docker.io/library/busybox:latest. Exactly one of Tag and Digest is set.
type Reference struct {
	Registry string // registry host as users spell it, e.g. docker.io or 127.0.0.1:5000
	Path     string // repository path, e.g. library/busybox
	Tag      string
	Digest   string // algorithm:hex
}

// ParseReference normalises s the way the docker CLI does. A reference with
// both a tag and a digest is pinned by the digest; the tag is dropped, as
// the tag says nothing the digest does not already fix.
func ParseReference(s string) (Reference, error) {
	if s == "" {
		return Reference{}, fmt.Errorf("%w: empty image reference", ErrInvalidReference)
	}
	if strings.TrimSpace(s) != s {
		return Reference{}, fmt.Errorf("%w %q: surrounding white space", ErrInvalidReference, s)
	}
	ref, err := name.ParseReference(s)
	if err != nil {
		return Reference{}, fmt.Errorf("%w %q: %w", ErrInvalidReference, s, err)
	}
	r := Reference{
		Registry: canonicalRegistry(ref.Context().RegistryStr()),
		Path:     ref.Context().RepositoryStr(),
	}
	// Docker Hub's official images live under library/, whichever of its
	// names the reference used (go-containerregistry adds it only for
	// index.docker.io and docker.io).
	if r.Registry == dockerHub && !strings.Contains(r.Path, "/") {
		r.Path = "library/" + r.Path
	}
	// go-containerregistry checks the characters of the path, not its
	// components: "/", "a//b" and "a/" would pass.
	for _, c := range strings.Split(r.Path, "/") {
		if !pathComponent.MatchString(c) {
			return Reference{}, fmt.Errorf("%w %q: repository path component %q", ErrInvalidReference, s, c)
		}
	}
	switch v := ref.(type) {
	case name.Digest:
		r.Digest = v.DigestStr()
	case name.Tag:
		r.Tag = v.TagStr()
	}
	return r, nil
}

// pathComponent is one component of a repository path, as the OCI
// distribution spec defines it.
var pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)

// canonicalRegistry maps the several names of Docker Hub to one.
func canonicalRegistry(host string) string {
	switch host {
	case name.DefaultRegistry, "registry-1.docker.io", dockerHub:
		return dockerHub
	}
	return host
}

// Name is the repository without tag or digest: docker.io/library/busybox.
func (r Reference) Name() string { return r.Registry + "/" + r.Path }

// String is the full normalised reference.
func (r Reference) String() string {
	if r.Digest != "" {
		return r.Name() + "@" + r.Digest
	}
	return r.Name() + ":" + r.Tag
}

// WithDigest is the same repository pinned to digest d.
func (r Reference) WithDigest(d string) Reference {
	return Reference{Registry: r.Registry, Path: r.Path, Digest: d}
}

// on is r as a go-containerregistry reference served by host, which is the
// registry itself or one of its mirrors.
func (r Reference) on(host string, insecure bool) (name.Reference, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	if r.Digest != "" {
		return name.NewDigest(host+"/"+r.Path+"@"+r.Digest, opts...)
	}
	return name.NewTag(host+"/"+r.Path+":"+r.Tag, opts...)
}

// repository is r's repository served by host.
func (r Reference) repository(host string, insecure bool) (name.Repository, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	return name.NewRepository(host+"/"+r.Path, opts...)
}
