package image

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/internal/faultpoint"
)

// A layer's files must be on disk before a record that survives a power
// cut says it exists: after one, a published layer with empty files would
// be used as it is. Flushing the whole filesystem (syncfs) per layer did
// that, and also waited for every other writer on the disk: half of a
// pull's time on a busy node (docs/performance.md). Waiting for the
// layer's own fsyncs before publishing it still left the pull waiting for
// the disk.
//
// Now a layer is published as soon as its files are written and checked,
// its record marked pending on this boot (the kernel's boot ID), and
// flushed right after, once no pull is running (or after flushHold): every
// file and directory it wrote, and the layer directory's entry, fsynced by
// a few goroutines at once; then the record loses its mark. Before the
// flush only the page cache holds the files, which is all a container
// needs as long as the machine runs: a berth killed and restarted on the
// same boot finds them whole and flushes them itself. A power cut is a new
// boot: a record still pending on another boot is dropped at start, with
// the layer and every image needing it, and the kubelet pulls again.
// Without a boot ID the layer is flushed before it is published.
//
// The flush waits for the pulls to end because, with ext4's ordered
// journal, any fsync (the image record's) waits for the data of every file
// whose blocks are allocated in the running transaction: a layer's flush
// running meanwhile would make the pull wait for its disk writes after all.

const (
	syncDeferred   = iota // published pending on this boot, flushed in the background (flushLater)
	syncFiles             // writeback started per file, every file and directory fsynced at the end, in parallel, then published
	syncEach              // each file fsynced as soon as it is complete, in parallel
	syncFilesystem        // one syncfs of the store's filesystem per layer
)

// flushHold bounds how long a pending layer waits for running pulls to end.
const flushHold = 2 * time.Second

const (
	syncWorkers = 8       // fsyncs in flight per layer: the journal batches them
	writeback   = 8 << 20 // a file's bytes written between writeback starts
)

// syncer fsyncs and closes the descriptors it is given.
type syncer struct {
	fds  chan int
	wg   sync.WaitGroup
	mu   sync.Mutex
	err  error
	done bool
}

func newSyncer() *syncer {
	s := &syncer{fds: make(chan int, 256)}
	for range syncWorkers {
		s.wg.Go(func() {
			for fd := range s.fds {
				if err := unix.Fsync(fd); err != nil {
					s.fail(fmt.Errorf("fsync: %w", err))
				}
				unix.Close(fd)
			}
		})
	}
	return s
}

func (s *syncer) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// add takes over fd: it is fsynced, then closed.
func (s *syncer) add(fd int) { s.fds <- fd }

// addDup fsyncs what fd refers to, leaving fd to the caller.
func (s *syncer) addDup(fd int) error {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("dup for fsync: %w", err)
	}
	s.add(d)
	return nil
}

// addPath fsyncs the file or directory at path.
func (s *syncer) addPath(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s for fsync: %w", path, err)
	}
	s.add(fd)
	return nil
}

// wait returns when every fsync has, with the first error. It must be
// called once, whatever happened, so that no descriptor is left open.
func (s *syncer) wait() error {
	if s.done {
		return s.err
	}
	s.done = true
	close(s.fds)
	s.wg.Wait()
	return s.err
}

// startWriteback asks the kernel to begin writing fd's bytes from off to
// off+n, without waiting: the fsync at the end then finds them on their
// way. Only a hint; errors show up at the fsync.
func startWriteback(fd int, off, n int64) {
	_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// bootID names the running boot of the machine ("" if the kernel does not
// say): a pending layer record from another boot may have lost its data.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// flusher is the background flush of layers published pending.
type flusher struct {
	mu      sync.Mutex
	queue   []*layerRecord
	running chan struct{} // closed when the running flusher returns; nil: none runs
	kick    chan struct{} // a pull ended
}

// flushLater queues rec, a layer just published pending, for its flush.
func (s *Service) flushLater(rec *layerRecord) {
	f := &s.flush
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, rec)
	if f.running == nil {
		done := make(chan struct{})
		f.running = done
		go s.runFlusher(done)
	}
}

// pullEnded lets a flusher waiting for quiet look again.
func (s *Service) pullEnded() {
	select {
	case s.flush.kick <- struct{}{}:
	default:
	}
}

func (s *Service) runFlusher(done chan struct{}) {
	defer close(done)
	f := &s.flush
	for {
		s.waitQuiet(flushHold)
		f.mu.Lock()
		q := f.queue
		f.queue = nil
		if len(q) == 0 {
			f.running = nil
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		s.flushLayers(q)
	}
}

// waitQuiet returns when no pull is in flight, or after hold.
func (s *Service) waitQuiet(hold time.Duration) {
	timer := time.NewTimer(hold)
	defer timer.Stop()
	for s.pullsInFlight() > 0 {
		select {
		case <-s.flush.kick:
		case <-timer.C:
			return
		}
	}
}

// Flush waits until every layer published pending so far is flushed (or
// its flush failed), or ctx ends: before a clean shutdown, and in tests.
func (s *Service) Flush(ctx context.Context) error {
	for {
		s.flush.mu.Lock()
		done := s.flush.running
		s.flush.mu.Unlock()
		if done == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// currentLayer says whether rec is still the store's record of its layer.
func (s *Service) currentLayer(rec *layerRecord) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.layers[rec.ChainID] == rec
}

// flushLayers makes the pending layers recs durable together: every file
// and directory fsynced in parallel, then the layers directory (their
// renames), then each record rewritten without its mark. A layer removed
// meanwhile is skipped; one whose flush fails stays pending (flushed by
// the next start on this boot, dropped after a reboot).
func (s *Service) flushLayers(recs []*layerRecord) {
	start := time.Now()
	fsync := newSyncer()
	var walked []*layerRecord
	for _, rec := range recs {
		if !s.currentLayer(rec) {
			continue
		}
		if _, _, err := diskUsage(s.layerPath(rec.ChainID), fsync, nil); err != nil {
			if s.currentLayer(rec) {
				s.log.Error("flush layer", "layer", rec.ChainID, "error", err)
			}
			continue
		}
		walked = append(walked, rec)
	}
	if err := fsync.wait(); err != nil {
		s.log.Error("flush layers", "layers", len(walked), "error", err)
		return
	}
	if err := fsyncPath(s.layerDir); err != nil {
		s.log.Error("flush layers", "layers", len(walked), "error", err)
		return
	}
	if len(walked) > 0 {
		s.faults.Hit(faultpoint.PullLayerFlushing, walked[0].ChainID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rec := range walked {
		if s.layers[rec.ChainID] != rec {
			continue // removed meanwhile
		}
		durable := *rec
		durable.PendingBoot = ""
		if err := s.layerRecs.Put(digestHex(rec.ChainID), &durable); err != nil {
			s.log.Error("record flushed layer", "layer", rec.ChainID, "error", err)
			continue
		}
		s.layers[rec.ChainID] = &durable
		n++
	}
	s.log.Debug("layers flushed", "layers", n, "duration", time.Since(start))
}

func fsyncPath(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s for fsync: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}
