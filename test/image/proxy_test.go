package image_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
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
	rate     int64          // blob bytes per second and connection; 0 is unthrottled
	cutAt    []int64        // break the connection sending when the blob bytes sent in all pass each
	noRange  bool           // drop Range headers: answer with the whole blob, as some registries do
	sent     int64          // blob bytes read from upstream
	dead     bool
	first    time.Time // when the first blob byte went out
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
		if p.manGets == nil { // a proxy not made by newProxy (newTLSProxy)
			p.manGets = map[string]int{}
		}
		p.manGets[r.URL.Path]++
	}
	failWith, cutAfter, rate, dead, cuts, noRange := p.failWith, p.cutAfter, p.rate, p.dead, len(p.cutAt), p.noRange
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
	if noRange {
		out.Header.Del("Range")
	}
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
	if !blob || (cutAfter == 0 && rate == 0 && cuts == 0) {
		if !blob {
			io.Copy(w, resp.Body)
			return
		}
		p.markFirst()
		n, _ := io.Copy(w, resp.Body)
		p.mu.Lock()
		p.sent += n
		p.mu.Unlock()
		return
	}
	buf := make([]byte, 64<<10)
	start, sentHere := time.Now(), int64(0)
	for {
		n, err := resp.Body.Read(buf)
		p.mu.Lock()
		p.sent += int64(n)
		over := cutAfter > 0 && p.sent > cutAfter
		cut := len(p.cutAt) > 0 && p.sent > p.cutAt[0]
		if cut {
			p.cutAt = p.cutAt[1:]
		}
		p.mu.Unlock()
		if over {
			break
		}
		if cut {
			// Part of this read goes out, then the connection breaks.
			w.Write(buf[:n/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		if n > 0 {
			p.markFirst()
		}
		if _, werr := w.Write(buf[:n]); werr != nil || err != nil {
			return
		}
		if sentHere += int64(n); rate > 0 {
			w.(http.Flusher).Flush()
			if ahead := time.Duration(sentHere*int64(time.Second)/rate) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
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

func (p *proxy) markFirst() {
	p.mu.Lock()
	if p.first.IsZero() {
		p.first = time.Now()
	}
	p.mu.Unlock()
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
