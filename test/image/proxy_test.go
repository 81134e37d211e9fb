package image_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// proxy stands in front of a registry on loopback, counting what berth
// asks for. It can also fail every request, or die in the middle of a
// blob like a killed registry.
type proxy struct {
	srv  *httptest.Server
	Host string

	mu       sync.Mutex
	requests int
	blobGets map[string]int // digest → GETs
	manGets  map[string]int // manifest path (tag or digest) → GETs
	failWith int            // answer everything with this status
	cutAfter int64          // die once this many blob bytes have been sent in all
	sent     int64
	dead     bool
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	p := &proxy{blobGets: map[string]int{}, manGets: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, upstream) }))
	t.Cleanup(p.srv.Close)
	p.Host = strings.TrimPrefix(p.srv.URL, "http://")
	return p
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request, upstream string) {
	p.mu.Lock()
	p.requests++
	blob := r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/")
	if blob {
		p.blobGets[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
	}
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") {
		p.manGets[r.URL.Path]++
	}
	failWith, cutAfter, dead := p.failWith, p.cutAfter, p.dead
	p.mu.Unlock()
	if dead {
		panic(http.ErrAbortHandler)
	}
	if failWith != 0 {
		http.Error(w, "proxy told to fail", failWith)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+upstream+r.URL.RequestURI(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if !blob || cutAfter == 0 {
		io.Copy(w, resp.Body)
		return
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		p.mu.Lock()
		p.sent += int64(n)
		over := p.sent > cutAfter
		p.mu.Unlock()
		if over {
			break
		}
		if _, werr := w.Write(buf[:n]); werr != nil || err != nil {
			return
		}
	}
	w.(http.Flusher).Flush()
	// The registry dies: this connection breaks, and so does every later one.
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
	p.srv.CloseClientConnections()
	panic(http.ErrAbortHandler)
}

func (p *proxy) stats() (requests int, blobGets map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gets := make(map[string]int, len(p.blobGets))
	for k, v := range p.blobGets {
		gets[k] = v
	}
	return p.requests, gets
}

func (p *proxy) manifestGets() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	gets := make(map[string]int, len(p.manGets))
	for k, v := range p.manGets {
		gets[k] = v
	}
	return gets
}

func (p *proxy) set(f func(p *proxy)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}
