package image

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// newHTTPTransport is the connection pool for registry traffic. insecure
// skips TLS verification, for registries configured as insecure.
func newHTTPTransport(insecure bool) *http.Transport {
	return newHTTPTransportTLS(&tls.Config{InsecureSkipVerify: insecure}) //nolint:gosec // only for hosts configured insecure
}

// newHTTPTransportTLS is a connection pool with TLS settings of its own
// (a registry host's CAs or client keys).
func newHTTPTransportTLS(cfg *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       cfg,
	}
}

// useHostsDir makes the registries read containerd's host directories
// below root (registry_config_path) on every pull. Hosts with TLS
// settings of their own get pools as stall-guarded as the shared ones.
func (r *registries) useHostsDir(root string, log *slog.Logger, stall time.Duration) {
	if root == "" {
		return
	}
	r.log = log
	r.dir = newHostsDir(root, log, func(cfg *tls.Config) http.RoundTripper {
		return &stallTransport{inner: newHTTPTransportTLS(cfg), timeout: stall}
	})
}

// endpointTransport is what a pull from ep goes through: the shared pool
// for its security, or the pool of its own TLS settings, moving requests
// under its API root and adding its headers when a hosts.toml says so.
func (s *Service) endpointTransport(ep endpoint) http.RoundTripper {
	base := ep.transport
	if base == nil {
		base = s.transport(ep.insecure)
	}
	base = manifestLimit{inner: base}
	if (ep.apiRoot == "" || ep.apiRoot == defaultAPIRoot) && len(ep.header) == 0 {
		return base
	}
	root := ep.apiRoot
	if root == "" {
		root = defaultAPIRoot
	}
	return &hostRewrite{inner: base, host: ep.host, apiRoot: strings.TrimSuffix(root, "/"), header: ep.header}
}

// hostRewrite adapts the requests go-containerregistry makes (always
// /v2/... at the root) to one host of a hosts.toml. Requests to other
// hosts, such as a token service or a blob redirect, pass untouched.
type hostRewrite struct {
	inner   http.RoundTripper
	host    string
	apiRoot string // replaces the leading /v2; "" with override_path at /
	header  http.Header
}

func (t *hostRewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != t.host {
		return t.inner.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	if p := out.URL.Path; t.apiRoot != defaultAPIRoot && (p == defaultAPIRoot || strings.HasPrefix(p, defaultAPIRoot+"/")) {
		out.URL.Path = t.apiRoot + strings.TrimPrefix(p, defaultAPIRoot)
		if out.URL.Path == "" {
			out.URL.Path = "/"
		}
		out.URL.RawPath = ""
	}
	for k, v := range t.header {
		if _, set := out.Header[k]; !set {
			out.Header[k] = v
		}
	}
	return t.inner.RoundTrip(out)
}

// stallTransport fails a request when the network gives nothing for
// timeout: while waiting for response headers, and during every body Read.
// Time the caller spends between Reads (unpacking to disk) does not count,
// so a slow disk is not mistaken for a stalled registry.
type stallTransport struct {
	inner   http.RoundTripper
	timeout time.Duration
}

func (t *stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.timeout <= 0 {
		return t.inner.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	b := &stallBody{
		timeout: t.timeout,
		cancel:  cancel,
		stall:   fmt.Errorf("%w: no data from %s for %s", ErrStalled, req.URL.Host, t.timeout),
	}
	b.timer = time.AfterFunc(t.timeout, b.fire)
	resp, err := t.inner.RoundTrip(req.WithContext(ctx))
	b.timer.Stop()
	if b.stalled.Load() {
		if resp != nil {
			resp.Body.Close()
		}
		return nil, b.stall
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	b.body = resp.Body
	resp.Body = b
	return resp, nil
}

type stallBody struct {
	body    io.ReadCloser
	timeout time.Duration
	cancel  context.CancelCauseFunc
	stall   error

	timer   *time.Timer
	stalled atomic.Bool
}

func (b *stallBody) fire() {
	b.stalled.Store(true)
	b.cancel(b.stall)
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.body.Read(p)
	b.timer.Stop()
	if err != nil && b.stalled.Load() {
		return n, b.stall
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.timer.Stop()
	err := b.body.Close()
	b.cancel(nil)
	return err
}

// maxDocument bounds every JSON document a pull reads into memory: a
// manifest, an index, a config (as maxArchiveJSON does for an import).
// go-containerregistry reads a manifest whole and allows 100 MiB, and a
// config as large as its manifest says, so a hostile registry could
// make berth hold gigabytes (the pull side of containerd's
// CVE-2023-25153). The distribution registry stores no manifest over
// 4 MiB.
const maxDocument = maxArchiveJSON

// manifestLimit fails a manifest response over maxDocument: at once when
// its length says so, else once that many bytes went by.
type manifestLimit struct{ inner http.RoundTripper }

func (t manifestLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.inner.RoundTrip(req)
	if err != nil || !strings.Contains(req.URL.Path, "/manifests/") {
		return resp, err
	}
	tooLarge := fmt.Errorf("the manifest at %s is larger than berth's limit of %d bytes", req.URL.Redacted(), maxDocument)
	if resp.ContentLength > maxDocument {
		resp.Body.Close()
		return nil, tooLarge
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: maxDocument + 1, err: tooLarge}
	return resp, nil
}

type limitedBody struct {
	io.ReadCloser
	left int64
	err  error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, b.err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left <= 0 {
		return n, b.err
	}
	return n, err
}
