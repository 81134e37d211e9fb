package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutWriter breaks the connection once limit bytes of the body are out.
type cutWriter struct {
	http.ResponseWriter
	limit int64
	n     int64
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if w.n+int64(len(p)) > w.limit {
		k := w.limit - w.n
		w.ResponseWriter.Write(p[:k])
		w.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	w.n += int64(len(p))
	return w.ResponseWriter.Write(p)
}

func TestBlobReaderResumes(t *testing.T) {
	blob := make([]byte, 8<<20)
	rand.Read(blob)
	sum := sha256.Sum256(blob)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	size := int64(len(blob))

	tests := []struct {
		name    string
		ranges  bool  // the server honours Range
		cuts    int   // connections broken, each cutEvery bytes into its answer
		corrupt bool  // a byte flipped
		max     int64 // most bytes the server may send in all
		err     string
	}{
		{name: "no cut", ranges: true, max: size},
		{name: "three cuts, ranges", ranges: true, cuts: 3, max: size + size/10},
		{name: "three cuts, no ranges", cuts: 3, max: 4 * size},
		{name: "cut before any byte", ranges: true, cuts: 100, max: 100 * size, err: "unexpected EOF"},
		{name: "corrupt", ranges: true, corrupt: true, max: size, err: "sha256 checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			cuts, sent, requests := 0, int64(0), 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !tt.ranges {
					r.Header.Del("Range")
				}
				data := blob
				if tt.corrupt {
					data = bytes.Clone(blob)
					data[len(data)/2] ^= 1
				}
				mu.Lock()
				requests++
				cut := cuts < tt.cuts
				if cut {
					cuts++
				}
				mu.Unlock()
				cw := &countWriter{ResponseWriter: w, mu: &mu, n: &sent}
				var out http.ResponseWriter = cw
				if cut {
					// A quarter of the blob further each time; from 0
					// again without ranges.
					limit := size / int64(tt.cuts+1)
					if !tt.ranges {
						limit *= int64(cuts)
					}
					out = &cutWriter{ResponseWriter: cw, limit: limit}
					if tt.cuts > 10 {
						out = &cutWriter{ResponseWriter: cw, limit: 0} // no byte ever
					}
				}
				http.ServeContent(out, r, "blob", time.Time{}, bytes.NewReader(data))
			}))
			defer srv.Close()
			ctx := context.Background()
			b := newBlobReader(ctx, srv.Client(), srv.URL+"/v2/x/blobs/"+digest, digest, size, nil)
			defer b.Close()
			got, err := io.ReadAll(b)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("read: %v, want an error saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("read: %v (after %d requests)", err, requests)
			}
			if !bytes.Equal(got, blob) {
				t.Fatalf("read %d bytes, not the blob", len(got))
			}
			if b.resumes != tt.cuts {
				t.Errorf("%d resumes, want %d", b.resumes, tt.cuts)
			}
			mu.Lock()
			defer mu.Unlock()
			if sent > tt.max {
				t.Errorf("server sent %d bytes for a %d-byte blob, want at most %d", sent, size, tt.max)
			}
		})
	}
}

type countWriter struct {
	http.ResponseWriter
	mu *sync.Mutex
	n  *int64
}

func (w *countWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.mu.Lock()
	*w.n += int64(n)
	w.mu.Unlock()
	return n, err
}

func (w *countWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }
