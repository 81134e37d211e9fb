package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// chainID of a layer is digest(parent chain ID + " " + diff ID); the
// bottom layer's chain ID is its diff ID. It names the whole stack up to
// the layer, so equal chain IDs are interchangeable directories.
func chainIDs(diffIDs []string) []string {
	out := make([]string, len(diffIDs))
	for i, d := range diffIDs {
		if i == 0 {
			out[i] = d
			continue
		}
		sum := sha256.Sum256([]byte(out[i-1] + " " + d))
		out[i] = "sha256:" + hex.EncodeToString(sum[:])
	}
	return out
}

func (s *Service) hasLayer(chainID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.layers[chainID]
	return ok
}

// fetchLayer makes sure layer l is unpacked in the store. Concurrent
// callers for the same layer share one download.
func (s *Service) fetchLayer(ctx context.Context, blobs func() (*blobSource, error), l layerRef) error {
	return doErr(ctx, &s.flights, l.ChainID, func(ctx context.Context) error {
		if s.hasLayer(l.ChainID) {
			return nil
		}
		select {
		case s.downloads <- struct{}{}:
			defer func() { <-s.downloads }()
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if s.hasLayer(l.ChainID) {
			return nil
		}
		src, err := blobs()
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		rc := newBlobReader(ctx, src.client, src.base+l.Digest, l.Digest, l.Size, s.metrics)
		rc.onDrop = func(off int64, err error) {
			s.log.Info("layer download interrupted, resuming", "layer", l.Digest, "at", off, "of", l.Size, "error", err)
		}
		defer rc.Close()
		prog, forget := s.layerCounter(l.ChainID)
		defer forget()
		if err := s.unpackLayer(ctx, &progressReader{r: rc, s: s, chain: l.ChainID, p: prog}, l); err != nil {
			return fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		return nil
	})
}

// progressReader counts a layer download for the pulls waiting for it.
type progressReader struct {
	r     io.Reader
	s     *Service
	chain string
	p     *layerProgress
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if n > 0 {
		if r.p.done.Add(int64(n)) == int64(n) {
			r.s.firstByte(r.chain)
		}
	}
	return n, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// decompress picks the decompressor from the stream's first bytes rather
// than the media type, which registries and builders get wrong.
func decompress(br *bufio.Reader) (io.ReadCloser, error) {
	magic, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch {
	case len(magic) >= 2 && magic[0] == gzipMagic[0] && magic[1] == gzipMagic[1]:
		return gzip.NewReader(br)
	case len(magic) == 4 && string(magic) == string(zstdMagic):
		d, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// unpackLayer streams the compressed blob rc into a temp directory, checks
// the compressed size and the diff ID (the blob's digest is rc's to
// check: blobReader at EOF, an import before it starts), then renames the
// directory into the store.
func (s *Service) unpackLayer(ctx context.Context, rc io.Reader, l layerRef) (err error) {
	tmp, err := os.MkdirTemp(s.layerDir, tempPrefix+digestHex(l.ChainID)+"-")
	if err != nil {
		return fmt.Errorf("create layer dir: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	// The layer root is the container's "/" wherever no upper layer says otherwise.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}

	counted := &countingReader{r: rc}
	br := bufio.NewReaderSize(counted, 256<<10)
	dec, err := decompress(br)
	if err != nil {
		return fmt.Errorf("decompress: %w", classify(err))
	}
	defer dec.Close()
	diff := sha256.New()
	tee := io.TeeReader(dec, diff)
	mode := s.syncMode
	if mode == syncDeferred && s.bootID == "" {
		mode = syncFiles // no boot ID to tell a crash from a reboot: flush before publishing
	}
	var fsync, each *syncer
	if mode == syncFiles || mode == syncEach {
		fsync = newSyncer()
		defer fsync.wait() // on the error paths: no descriptor left open
	}
	if mode == syncEach {
		each = fsync
	}
	if err := applyTarSync(ctx, s.log, tee, tmp, each, fsync != nil); err != nil {
		if errors.Is(err, errEscape) || ctx.Err() != nil {
			return err
		}
		// A corrupt blob shows up first as a tar or decompression error;
		// reading on to the end lets the digest check name the real cause.
		if _, derr := io.Copy(io.Discard, br); derr != nil {
			return fmt.Errorf("download: %w (unpack stopped at: %v)", derr, err)
		}
		return err
	}
	// The tar reader stops at the end-of-archive marker; the diff ID and
	// the blob digest cover everything after it too.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return fmt.Errorf("decompress: %w", classify(err))
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return fmt.Errorf("download: %w", classify(err))
	}
	if l.Size > 0 && counted.n != l.Size {
		return fmt.Errorf("blob is %d bytes, manifest says %d", counted.n, l.Size)
	}
	if got := "sha256:" + hex.EncodeToString(diff.Sum(nil)); got != l.DiffID {
		return fmt.Errorf("uncompressed content has digest %s, config says %s", got, l.DiffID)
	}
	walkSync := fsync
	if mode == syncEach {
		walkSync = nil
	}
	usage, inodes, err := diskUsage(tmp, walkSync, fsync)
	if err != nil {
		return err
	}
	s.faults.Hit(faultpoint.PullLayerWritten, l.ChainID)
	rec := &layerRecord{ChainID: l.ChainID, DiffID: l.DiffID, Digest: l.Digest, Usage: usage, Inodes: inodes}
	// Once the record says the layer exists, its files must survive a
	// power cut (sync.go): flushed before the rename that publishes them,
	// or published as pending on this boot and flushed right after.
	switch mode {
	case syncFiles, syncEach:
		if err := fsync.wait(); err != nil {
			return fmt.Errorf("sync layer: %w", err)
		}
	case syncFilesystem:
		if err := syncFS(tmp); err != nil {
			return err
		}
	case syncDeferred:
		rec.PendingBoot = s.bootID
	}
	s.faults.Hit(faultpoint.PullLayerUnpacked, l.ChainID)
	if err := s.commitLayer(tmp, rec); err != nil {
		return err
	}
	if rec.PendingBoot != "" {
		s.flushLater(rec)
		s.faults.Hit(faultpoint.PullLayerPublished, l.ChainID)
	}
	return nil
}

func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync layer: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("sync layer: %w", err)
	}
	return nil
}

func (s *Service) commitLayer(tmp string, rec *layerRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.layers[rec.ChainID]; ok {
		return os.RemoveAll(tmp) // someone else's run finished first
	}
	if s.pins[rec.ChainID] == 0 {
		// Every pull that wanted it has failed or given up meanwhile;
		// published now, it would belong to nobody.
		os.RemoveAll(tmp)
		return errors.New("layer no longer wanted")
	}
	final := s.layerPath(rec.ChainID)
	if err := os.RemoveAll(final); err != nil { // debris without a record
		return fmt.Errorf("replace layer dir: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	if err := s.layerRecs.Put(digestHex(rec.ChainID), rec); err != nil {
		os.RemoveAll(final)
		return err
	}
	s.layers[rec.ChainID] = rec
	return nil
}

// diskUsage counts the blocks and inodes under dir, each hard-linked
// inode once, handing every file and directory to fsync if not nil, and
// every directory to dirSync if not nil.
func diskUsage(dir string, fsync, dirSync *syncer) (bytes, inodes int64, err error) {
	seen := map[uint64]bool{}
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch mode := st.Mode & unix.S_IFMT; {
		case fsync != nil && (mode == unix.S_IFREG || mode == unix.S_IFDIR):
			if err := fsync.addPath(p); err != nil {
				return err
			}
		case dirSync != nil && mode == unix.S_IFDIR:
			if err := dirSync.addPath(p); err != nil {
				return err
			}
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		bytes += st.Blocks * 512
		inodes++
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("measure layer: %w", err)
	}
	return bytes, inodes, nil
}

// pin keeps chain IDs from being collected while a pull works on them.
func (s *Service) pin(chains []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range chains {
		s.pins[c]++
	}
}

// unpin undoes pin and collects whatever nothing else holds, which is how
// the layers of a failed pull disappear.
func (s *Service) unpin(chains []string) {
	s.mu.Lock()
	for _, c := range chains {
		if s.pins[c]--; s.pins[c] <= 0 {
			delete(s.pins, c)
		}
	}
	trash, err := s.collectLocked()
	s.mu.Unlock()
	s.emptyTrash(trash)
	if err != nil {
		s.log.Error("collect layers", "error", err)
	}
}

// collectLocked drops every layer that no image, pull or lease holds:
// record first, then the directory is renamed aside. The caller deletes
// the returned directories after unlocking.
func (s *Service) collectLocked() ([]string, error) {
	if s.foreign {
		return nil, nil
	}
	held := map[string]bool{}
	for _, img := range s.images {
		for _, l := range img.Layers {
			held[l.ChainID] = true
		}
	}
	for c := range s.pins {
		held[c] = true
	}
	for _, l := range s.leases {
		for _, c := range l.Layers {
			held[c] = true
		}
	}
	var trash []string
	for c := range s.layers {
		if held[c] {
			continue
		}
		if err := s.layerRecs.Delete(digestHex(c)); err != nil {
			return trash, err
		}
		delete(s.layers, c)
		aside := filepath.Join(s.layerDir, tempPrefix+"del-"+digestHex(c)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		if err := os.Rename(s.layerPath(c), aside); err != nil {
			s.log.Error("move collected layer aside", "layer", c, "error", err)
			continue
		}
		trash = append(trash, aside)
	}
	return trash, nil
}

func (s *Service) emptyTrash(dirs []string) {
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			s.log.Error("remove collected layer", "dir", d, "error", err)
		}
	}
}
