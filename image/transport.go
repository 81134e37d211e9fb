package image

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// newHTTPTransport is the connection pool for registry traffic. insecure
// skips TLS verification, for registries configured as insecure.
func newHTTPTransport(insecure bool) *http.Transport {
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
		TLSClientConfig:       &tls.Config{InsecureSkipVerify: insecure}, //nolint:gosec // only for hosts configured insecure
	}
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
