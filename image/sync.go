package image

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// A layer's files must be on disk before its record says it exists: after
// a power cut, a published layer with empty files would be used as it is.
// Flushing the whole filesystem (syncfs) per layer did that, and also
// waited for every other writer on the disk: half of a pull's time on a
// busy node (docs/performance.md). Now each file the unpacker writes is
// handed, once complete, to a few goroutines that fsync it while the
// unpack goes on; the directories are fsynced at the end, and the layer is
// published when every fsync has returned. Large files start their
// writeback while they are written (sync_file_range), so the final fsync
// of a big file has little left to wait for.

// layerSyncMode picks how unpackLayer makes a layer durable; syncFiles
// unless a benchmark compares.
var layerSyncMode = syncFiles

const (
	syncFiles      = iota // writeback started per file, every file and directory fsynced at the end, in parallel
	syncEach              // each file fsynced as soon as it is complete, in parallel
	syncFilesystem        // one syncfs of the store's filesystem per layer
)

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
