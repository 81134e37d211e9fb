package security_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// hostileRegistry is a registry of the test's own on loopback, serving
// whatever the test's handlers write: manifests and blobs a real
// registry would never hand out.
type hostileRegistry struct {
	Host string
	mu   sync.Mutex
	// manifests and blobs by repository, then reference or digest.
	manifests map[string]http.HandlerFunc
	blobs     map[string]http.HandlerFunc
	// gone is closed for each request whose client went away.
	gone chan string
	// auth, when set, is the Authorization every request must carry.
	auth string
}

func newHostileRegistry(t *testing.T) *hostileRegistry {
	t.Helper()
	r := &hostileRegistry{manifests: map[string]http.HandlerFunc{}, blobs: map[string]http.HandlerFunc{}, gone: make(chan string, 64)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	r.Host = l.Addr().String()
	return r
}

func (r *hostileRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.auth != "" && req.Header.Get("Authorization") != r.auth {
		w.Header().Set("WWW-Authenticate", `Basic realm="hostile"`)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if req.URL.Path == "/v2/" || req.URL.Path == "/v2" {
		w.WriteHeader(http.StatusOK)
		return
	}
	rest, ok := strings.CutPrefix(req.URL.Path, "/v2/")
	if !ok {
		http.NotFound(w, req)
		return
	}
	r.mu.Lock()
	var h http.HandlerFunc
	for _, kind := range []string{"/manifests/", "/blobs/"} {
		if repo, ref, ok := strings.Cut(rest, kind); ok {
			if kind == "/manifests/" {
				h = r.manifests[repo+"@"+ref]
			} else {
				h = r.blobs[ref]
			}
		}
	}
	r.mu.Unlock()
	if h == nil {
		http.NotFound(w, req)
		return
	}
	h(w, req)
	if req.Context().Err() != nil {
		r.gone <- req.URL.Path
	}
}

// manifest serves body as repo:ref's manifest.
func (r *hostileRegistry) manifest(repo, ref string, h http.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.manifests[repo+"@"+ref] = h
}

func (r *hostileRegistry) blob(digest string, h http.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[digest] = h
}

// serveJSON answers with a document of the given media type.
func serveJSON(mediaType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", mediaType)
		w.Header().Set("Docker-Content-Digest", digestOf(body))
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		if req.Method != http.MethodHead {
			w.Write(body)
		}
	}
}

func digestOf(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

const (
	mtManifest = "application/vnd.oci.image.manifest.v1+json"
	mtConfig   = "application/vnd.oci.image.config.v1+json"
	mtLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// manifestJSON is an OCI image manifest of config and layers.
func manifestJSON(config descriptor, layers ...descriptor) []byte {
	if layers == nil {
		layers = []descriptor{}
	}
	b, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mtManifest, "config": config, "layers": layers})
	return b
}

// configJSON is an image config with the given layer diff ids.
func configJSON(diffIDs ...string) []byte {
	if diffIDs == nil {
		diffIDs = []string{}
	}
	b, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Cmd": []string{"/bin/sh"}}, "rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	return b
}
