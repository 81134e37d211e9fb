package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// maxBlobFailures is how many times in a row a blob download may fail
// without a byte coming in between before the pull gives up. A download
// that keeps moving is resumed however often its connection drops.
const maxBlobFailures = 4

// blobReader downloads one blob and resumes it when the connection
// drops: the next request asks for the rest with a Range header, and the
// digest goes on from the bytes already read (the same sha256 state), so
// nothing is read twice by the unpacker above. A registry that answers a
// Range request with the whole blob (200, not 206) is read from the start
// again, the bytes already had skipped: the unpack goes on, only the
// network pays. A stalled registry (ErrStalled, per read) is not resumed:
// it fails the pull as before.
type blobReader struct {
	ctx     context.Context
	client  *http.Client
	url     string
	digest  string // sha256:...
	size    int64  // from the manifest; 0 if unknown
	metrics *Metrics
	onDrop  func(off int64, err error)

	body     io.ReadCloser
	off      int64 // bytes delivered, all of them through sum
	sum      hash.Hash
	failures int // in a row, without a byte
	resumes  int
	done     bool
	err      error // what every Read answers once done: EOF or the digest's failure
}

func newBlobReader(ctx context.Context, client *http.Client, url, digest string, size int64, m *Metrics) *blobReader {
	return &blobReader{ctx: ctx, client: client, url: url, digest: digest, size: size, metrics: m, sum: sha256.New()}
}

func (b *blobReader) Read(p []byte) (int, error) {
	if b.done {
		return 0, b.err
	}
	for {
		if b.body == nil {
			if err := b.open(); err != nil {
				if b.retry(err) {
					continue
				}
				return 0, err
			}
		}
		n, err := b.body.Read(p)
		if n > 0 {
			b.sum.Write(p[:n])
			b.off += int64(n)
			b.failures = 0
			b.metrics.addBytes(int64(n))
		}
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, io.EOF):
			// A whole answer (a dropped one ends in ErrUnexpectedEOF):
			// a blob shorter than the manifest says is the wrong blob.
			b.body.Close()
			b.body = nil
			b.done = true
			if got := "sha256:" + hex.EncodeToString(b.sum.Sum(nil)); got != b.digest {
				b.err = fmt.Errorf("sha256 checksum of the blob's %d bytes is %s, manifest says %s", b.off, got, b.digest)
				return n, b.err
			}
			b.err = io.EOF
			return n, io.EOF
		}
		b.body.Close()
		b.body = nil
		if !b.retry(err) {
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
}

// retry says whether err is a dropped connection worth resuming after,
// and waits a little before the next attempt.
func (b *blobReader) retry(err error) bool {
	if b.ctx.Err() != nil || errors.Is(err, ErrStalled) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnauthorized) {
		return false
	}
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode < 500 {
		return false
	}
	var bad *badBlobAnswer
	if errors.As(err, &bad) {
		return false
	}
	b.failures++
	if b.failures > maxBlobFailures {
		return false
	}
	b.resumes++
	if b.onDrop != nil {
		b.onDrop(b.off, err)
	}
	t := time.NewTimer(time.Duration(b.failures-1) * 200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-b.ctx.Done():
		return false
	}
}

// badBlobAnswer is an answer to a blob request that makes no sense (a
// range other than the one asked for): not retried.
type badBlobAnswer struct{ msg string }

func (e *badBlobAnswer) Error() string { return e.msg }

// open requests the blob from b.off on.
func (b *blobReader) open() error {
	req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, b.url, nil)
	if err != nil {
		return err
	}
	if b.off > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(b.off, 10)+"-")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent && b.off > 0:
		// Content-Range: bytes <first>-<last>/<size>
		want := "bytes " + strconv.FormatInt(b.off, 10) + "-"
		if cr := resp.Header.Get("Content-Range"); !strings.HasPrefix(cr, want) {
			resp.Body.Close()
			return &badBlobAnswer{fmt.Sprintf("asked for bytes %d- of the blob, the registry sent %q", b.off, cr)}
		}
		b.body = resp.Body
		return nil
	case resp.StatusCode == http.StatusOK:
		if b.off > 0 {
			// No ranges here: the whole blob again, the part already
			// read skipped (and counted, as it crossed the network).
			n, err := io.CopyN(io.Discard, resp.Body, b.off)
			b.metrics.addBytes(n)
			if err != nil {
				resp.Body.Close()
				return fmt.Errorf("skip the %d bytes already read: %w", b.off, err)
			}
		}
		b.body = resp.Body
		return nil
	}
	defer resp.Body.Close()
	return classify(transport.CheckError(resp, http.StatusOK))
}

func (b *blobReader) Close() error {
	if !b.done {
		b.done, b.err = true, errors.New("blob reader closed")
	}
	if b.body != nil {
		err := b.body.Close()
		b.body = nil
		return err
	}
	return nil
}
