package faults_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stuckFS is a FUSE filesystem served by the test itself, speaking the
// kernel's protocol on /dev/fuse directly: an empty root directory that
// answers until Hang, then reads every request and answers none. A
// process that touches it after that sleeps in the kernel; once SIGKILLed
// there it is in uninterruptible sleep (D) until Abort, as behind a FUSE
// server that wedged or an NFS server gone.
type stuckFS struct {
	t    testing.TB
	Dir  string
	dev  *os.File
	conn int // the connection's number under /sys/fs/fuse/connections
	hung atomic.Bool
	done chan struct{}
}

// FUSE opcodes and the sizes of the replies the server gives.
const (
	fuseLookup      = 1
	fuseForget      = 2
	fuseGetattr     = 3
	fuseStatfs      = 17
	fuseRelease     = 18
	fuseFlush       = 25
	fuseInit        = 26
	fuseOpendir     = 27
	fuseReaddir     = 28
	fuseReleasedir  = 29
	fuseAccess      = 34
	fuseInterrupt   = 36
	fuseBatchForget = 42

	fuseInHeader = 40
)

// mountStuckFS mounts one at dir (made if missing); the test's end aborts
// and unmounts it, whatever happened.
func mountStuckFS(t testing.TB, dir string) *stuckFS {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		// A kernel with fuse as a module not loaded yet (kmod is one of
		// hack/install-deps' packages).
		if out, err := exec.Command("modprobe", "fuse").CombinedOutput(); err != nil {
			t.Skipf("no /dev/fuse, and modprobe fuse failed: %v: %s", err, out)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Skipf("open /dev/fuse: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40755,user_id=0,group_id=0,allow_other", fd)
	if err := unix.Mount("berth-stuckfs", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Fatalf("mount fuse at %s: %v", dir, err)
	}
	f := &stuckFS{t: t, Dir: dir, dev: os.NewFile(uintptr(fd), "/dev/fuse"), done: make(chan struct{})}
	f.conn = fuseConnection(t, dir)
	go f.serve()
	t.Cleanup(f.Abort)
	return f
}

// fuseConnection is the minor device number of the mount at dir, read
// from mountinfo (a stat of dir would ask the server).
func fuseConnection(t testing.TB, dir string) int {
	t.Helper()
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer mi.Close()
	sc := bufio.NewScanner(mi)
	conn := -1
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 4 && f[4] == dir {
			if _, minor, ok := strings.Cut(f[2], ":"); ok {
				conn, _ = strconv.Atoi(minor)
			}
		}
	}
	if conn < 0 {
		t.Fatalf("fuse mount %s not in mountinfo", dir)
	}
	return conn
}

// Hang makes the server read requests and answer none from now on.
func (f *stuckFS) Hang() { f.hung.Store(true) }

// Abort ends the connection the way an administrator does
// (/sys/fs/fuse/connections/N/abort): every waiting request fails with
// ENOTCONN and its process runs on. Then the mount goes.
func (f *stuckFS) Abort() {
	select {
	case <-f.done:
		return
	default:
	}
	abort := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", f.conn)
	if _, err := os.Stat(abort); err != nil {
		// fusectl is not mounted here: mount it for the write, then
		// leave the host as it was.
		if err := unix.Mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, ""); err == nil {
			defer unix.Unmount("/sys/fs/fuse/connections", 0)
		}
	}
	if err := os.WriteFile(abort, []byte("1"), 0o200); err != nil {
		f.t.Logf("abort fuse connection %d: %v (closing the device instead)", f.conn, err)
	}
	f.dev.Close() // the last fd of the device: aborts the connection too
	<-f.done
	if err := unix.Unmount(f.Dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		f.t.Errorf("unmount %s: %v", f.Dir, err)
	}
}

func (f *stuckFS) serve() {
	defer close(f.done)
	buf := make([]byte, 1<<20+4096)
	for {
		n, err := f.dev.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENOENT) {
				continue // a request interrupted before it was read
			}
			return // ENODEV once aborted, or the device closed
		}
		if n < fuseInHeader {
			continue
		}
		req := buf[:n]
		op := binary.LittleEndian.Uint32(req[4:])
		unique := binary.LittleEndian.Uint64(req[8:])
		switch op {
		case fuseForget, fuseBatchForget, fuseInterrupt:
			continue // no reply expected (an interrupt is just ignored)
		}
		if f.hung.Load() && op != fuseInit {
			continue
		}
		body, errno := f.answer(op, req[fuseInHeader:])
		out := make([]byte, 16+len(body))
		binary.LittleEndian.PutUint32(out[0:], uint32(len(out)))
		binary.LittleEndian.PutUint32(out[4:], uint32(-int32(errno)))
		binary.LittleEndian.PutUint64(out[8:], unique)
		copy(out[16:], body)
		if _, err := f.dev.Write(out); err != nil && !errors.Is(err, syscall.ENOENT) {
			return
		}
	}
}

// answer is the reply to one request: an empty, read-only root directory.
func (f *stuckFS) answer(op uint32, in []byte) ([]byte, syscall.Errno) {
	le := binary.LittleEndian
	switch op {
	case fuseInit:
		minor := le.Uint32(in[4:])
		out := make([]byte, 64) // fuse_init_out
		le.PutUint32(out[0:], 7)
		le.PutUint32(out[4:], min(minor, 31))
		le.PutUint32(out[8:], le.Uint32(in[8:])) // max_readahead as asked
		le.PutUint16(out[16:], 16)               // max_background
		le.PutUint16(out[18:], 12)               // congestion_threshold
		le.PutUint32(out[20:], 128<<10)          // max_write
		le.PutUint32(out[24:], 1)                // time_gran
		return out, 0
	case fuseGetattr:
		out := make([]byte, 16+88) // fuse_attr_out: valid 0, so every stat asks
		a := out[16:]
		now := uint64(time.Now().Unix())
		le.PutUint64(a[0:], 1) // ino
		for _, off := range []int{24, 32, 40} {
			le.PutUint64(a[off:], now)
		}
		le.PutUint32(a[60:], syscall.S_IFDIR|0o755) // mode
		le.PutUint32(a[64:], 2)                     // nlink
		le.PutUint32(a[80:], 4096)                  // blksize
		return out, 0
	case fuseLookup:
		return nil, syscall.ENOENT
	case fuseOpendir:
		return make([]byte, 16), 0 // fuse_open_out
	case fuseReaddir:
		return nil, 0 // no entries: the end of the directory
	case fuseReleasedir, fuseRelease, fuseFlush, fuseAccess:
		return nil, 0
	case fuseStatfs:
		out := make([]byte, 80)
		le.PutUint32(out[40:], 4096) // bsize
		le.PutUint32(out[44:], 255)  // namelen
		le.PutUint32(out[48:], 4096) // frsize
		return out, 0
	}
	return nil, syscall.ENOSYS
}
