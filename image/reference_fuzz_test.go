package image

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseReference: ParseReference never panics, refuses with
// ErrInvalidReference, and what it accepts is fully normalised: exactly one
// of tag and digest, a registry and a path, a String that parses back to
// the same reference (normalising twice changes nothing), and a reference
// that can be addressed on its own registry.
func FuzzParseReference(f *testing.F) {
	const dgst = "sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf"
	for _, s := range []string{
		"busybox", "busybox:1.36", "library/busybox", "docker.io/busybox",
		"index.docker.io/library/busybox:1", "registry-1.docker.io/x/y:z",
		"registry.k8s.io/pause:3.10", "127.0.0.1:5000/busybox", "localhost:5000/a/b/c:tag",
		"[::1]:5000/app:v2", "busybox@" + dgst, "busybox:1.36@" + dgst,
		"gcr.io/k8s-staging-cri-tools/test-image-digest@" + dgst,
		"", "Busybox", "busybox:", "busybox@sha256:abc", " busybox", "a:b:c", "a//b", "a/../b",
		"busybox:" + strings.Repeat("t", 129), strings.Repeat("a/", 200) + "b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReference(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidReference) {
				t.Fatalf("ParseReference(%q): %v is not ErrInvalidReference", s, err)
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if (r.Tag == "") == (r.Digest == "") {
			t.Fatalf("ParseReference(%q) = %+v: want exactly one of tag and digest", s, r)
		}
		if r.Registry == "" || r.Path == "" {
			t.Fatalf("ParseReference(%q) = %+v: no registry or path", s, r)
		}
		if strings.ContainsAny(r.Path, "@: ") || strings.HasPrefix(r.Path, "/") || strings.HasSuffix(r.Path, "/") {
			t.Fatalf("ParseReference(%q): path %q", s, r.Path)
		}
		if r.Registry == "index.docker.io" || r.Registry == "registry-1.docker.io" {
			t.Fatalf("ParseReference(%q): Docker Hub not canonical: %q", s, r.Registry)
		}
		again, err := ParseReference(r.String())
		if err != nil {
			t.Fatalf("ParseReference(%q) = %q, which does not parse: %v", s, r.String(), err)
		}
		if again != r {
			t.Fatalf("normalising twice changes %q: %+v then %+v", s, r, again)
		}
		if _, err := r.on(r.Registry, false); err != nil {
			t.Fatalf("%q cannot be addressed on its registry: %v", r.String(), err)
		}
		if _, err := r.repository(r.Registry, true); err != nil {
			t.Fatalf("%q: no repository on its registry: %v", r.String(), err)
		}
		if r.Digest != "" && r.WithDigest(r.Digest) != r {
			t.Fatalf("WithDigest of its own digest changes %+v", r)
		}
	})
}
