package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
	paxXattr       = "SCHILY.xattr."
	overlayXattr   = "trusted.overlay."
)

// errEscape marks a tar entry that tries to reach outside the layer root.
var errEscape = errors.New("path escapes the layer root")

// applyTar writes a layer's tar stream into the empty directory root as an
// overlayfs layer: whiteout files become 0/0 character devices and opaque
// markers become the trusted.overlay.opaque xattr. Every path is resolved
// beneath root by the kernel (openat2 RESOLVE_BENEATH), so no entry, symlink
// or hard link can make it write outside root; one that tries fails the
// whole layer.
func applyTar(ctx context.Context, log *slog.Logger, r io.Reader, root string) error {
	return applyTarSync(ctx, log, r, root, nil, false)
}

// applyTarSync is applyTar handing every regular file it writes to sync
// (if not nil) once complete; with writeback, each file's bytes are sent
// to the disk while it is written and when it is complete, without
// waiting.
func applyTarSync(ctx context.Context, log *slog.Logger, r io.Reader, root string, sync *syncer, writeback bool) error {
	rootFD, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open layer root: %w", err)
	}
	a := &applier{log: log, root: rootFD, lastFD: -1, buf: make([]byte, 128<<10), sync: sync, writeback: writeback, free: -1}
	defer a.close()
	var st unix.Statfs_t
	if unix.Fstatfs(rootFD, &st) == nil {
		a.free = int64(st.Bavail) * int64(st.Bsize)
	}

	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer tar: %w", err)
		}
		if err := a.apply(hdr, tr); err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
	return a.finish()
}

type applier struct {
	log       *slog.Logger
	root      int
	buf       []byte
	sync      *syncer // fsyncs complete files; nil: nobody does or it is done later
	writeback bool    // start the disk writes of files as they are written

	// The parent of consecutive entries is usually the same directory;
	// keeping it open saves an openat2 per entry. Only the parent of the
	// entry being applied is cached, and an entry can only remove things
	// inside that parent, so the cached directory itself never goes away.
	lastDir string
	lastFD  int

	dirs []dirMeta // directory times are set last: creating children changes them

	// free is what the layer's filesystem had left at the start, less
	// the files written since (-1: unknown). A file claiming more is
	// refused before a byte of it is written: a sparse entry that is all
	// hole takes a few bytes of layer and any size once written (Go's tar
	// reader hands holes out as zeros), so one pull could fill the node's
	// disk.
	free int64
}

type dirMeta struct {
	name         string
	atime, mtime time.Time
}

func (a *applier) close() {
	a.dropCache()
	unix.Close(a.root)
}

func (a *applier) dropCache() {
	if a.lastFD >= 0 {
		unix.Close(a.lastFD)
	}
	a.lastFD, a.lastDir = -1, ""
}

// cleanName turns a tar member name into a path relative to the layer
// root, refusing names that point above it or are absolute.
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("absolute path: %w", errEscape)
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", errEscape
	}
	return c, nil
}

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

func openBeneath(dirFD int, name string, flags uint64) (int, error) {
	fd, err := unix.Openat2(dirFD, name, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolveFlags})
	if errors.Is(err, unix.EXDEV) {
		return -1, errEscape
	}
	return fd, err
}

// parent opens directory dir (relative to root), creating missing
// components as root-owned 0755 directories, as tar allows entries whose
// parents have no entry of their own.
func (a *applier) parent(dir string) (int, error) {
	if dir == "." {
		return a.root, nil
	}
	if dir == a.lastDir && a.lastFD >= 0 {
		return a.lastFD, nil
	}
	fd, err := openBeneath(a.root, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		fd, err = a.mkdirAll(dir)
	}
	if err != nil {
		return -1, err
	}
	a.dropCache()
	a.lastDir, a.lastFD = dir, fd
	return fd, nil
}

func (a *applier) mkdirAll(dir string) (int, error) {
	cur := "."
	for _, c := range strings.Split(dir, "/") {
		next := path.Join(cur, c)
		fd, err := openBeneath(a.root, next, unix.O_RDONLY|unix.O_DIRECTORY)
		if errors.Is(err, unix.ENOENT) {
			pfd := a.root
			if cur != "." {
				if pfd, err = openBeneath(a.root, cur, unix.O_RDONLY|unix.O_DIRECTORY); err != nil {
					return -1, err
				}
			}
			err = unix.Mkdirat(pfd, c, 0o755)
			if pfd != a.root {
				unix.Close(pfd)
			}
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, fmt.Errorf("create parent %s: %w", next, err)
			}
			fd, err = openBeneath(a.root, next, unix.O_RDONLY|unix.O_DIRECTORY)
		}
		if err != nil {
			return -1, fmt.Errorf("open parent %s: %w", next, err)
		}
		if next == dir {
			return fd, nil
		}
		unix.Close(fd)
		cur = next
	}
	return -1, fmt.Errorf("open parent %s: %w", dir, unix.ENOENT)
}

func (a *applier) apply(hdr *tar.Header, r io.Reader) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	}
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("layer root must be a directory")
		}
		if err := a.setMeta(a.root, "", hdr, true); err != nil {
			return err
		}
		a.dirs = append(a.dirs, dirMeta{name: ".", atime: hdr.AccessTime, mtime: hdr.ModTime})
		return nil
	}
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	pfd, err := a.parent(dir)
	if err != nil {
		return err
	}

	switch {
	case base == whiteoutOpaque:
		return setXattrFD(pfd, overlayXattr+"opaque", "y")
	case strings.HasPrefix(base, whiteoutMeta):
		return nil // aufs bookkeeping (hard link dirs), meaningless to overlay
	case strings.HasPrefix(base, whiteoutPrefix):
		target := base[len(whiteoutPrefix):]
		if target == "" || target == "." || target == ".." {
			return fmt.Errorf("bad whiteout name")
		}
		if err := a.removeExisting(pfd, target); err != nil {
			return err
		}
		if err := unix.Mknodat(pfd, target, unix.S_IFCHR, 0); err != nil {
			return fmt.Errorf("create whiteout: %w", err)
		}
		return nil
	}

	var st unix.Stat_t
	err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	exists := err == nil
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("stat: %w", err)
	}
	// Tar replaces earlier entries of the same name, except that a
	// directory over a directory keeps the children already written.
	if exists && !(hdr.Typeflag == tar.TypeDir && st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		if err := a.removeExisting(pfd, base); err != nil {
			return err
		}
		exists = false
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		if !exists {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return fmt.Errorf("mkdir: %w", err)
			}
		}
		fd, err := openBeneath(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if err != nil {
			return fmt.Errorf("open dir: %w", err)
		}
		defer unix.Close(fd)
		if err := a.setMeta(fd, "", hdr, true); err != nil {
			return err
		}
		a.dirs = append(a.dirs, dirMeta{name: name, atime: hdr.AccessTime, mtime: hdr.ModTime})
		return nil

	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		if a.free >= 0 {
			if hdr.Size > a.free {
				return fmt.Errorf("it claims %d bytes, more than the %d left on the layer store's filesystem: %w", hdr.Size, a.free, unix.ENOSPC)
			}
			a.free -= hdr.Size
		}
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("create file: %w", err)
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		fw := &fileWriter{f: f, fd: fd, writeback: a.writeback}
		if _, err := io.CopyBuffer(fw, r, a.buf); err != nil {
			return fmt.Errorf("write file: %w", err)
		}
		if err := fw.close(); err != nil {
			return fmt.Errorf("write file: %w", err)
		}
		if a.writeback && fw.written > fw.started {
			startWriteback(fd, fw.started, fw.written-fw.started)
		}
		if err := a.setMeta(fd, "", hdr, true); err != nil {
			return err
		}
		if err := setTimes(pfd, base, hdr); err != nil {
			return err
		}
		if a.sync != nil {
			return a.sync.addDup(fd)
		}
		return nil

	case tar.TypeSymlink:
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("symlink: %w", err)
		}
		if err := a.setMeta(pfd, base, hdr, false); err != nil {
			return err
		}
		return setTimes(pfd, base, hdr)

	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
		}
		tdir, tbase := path.Split(target)
		tfd, err := openBeneath(a.root, path.Clean(tdir), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
		}
		defer unix.Close(tfd)
		if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
			return fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
		}
		return nil

	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			mode = unix.S_IFCHR
		case tar.TypeBlock:
			mode = unix.S_IFBLK
		}
		dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
		if err := unix.Mknodat(pfd, base, mode|0o600, int(dev)); err != nil {
			return fmt.Errorf("mknod: %w", err)
		}
		if err := a.setMeta(pfd, base, hdr, false); err != nil {
			return err
		}
		return setTimes(pfd, base, hdr)
	}
	return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
}

// fileWriter hides os.File's ReadFrom, which would bypass CopyBuffer's
// buffer and read the tar stream in small pieces. With writeback, a large
// file's bytes start for the disk while the rest is written.
//
// Runs of zeros are skipped, not written: the file gets holes there. A
// sparse entry of the tar (Go's reader hands its holes out as zeros)
// then costs no disk for its holes, nor does any file of zeros.
type fileWriter struct {
	f         *os.File
	fd        int
	writeback bool
	written   int64
	started   int64 // bytes whose writeback has been started
	hole      bool  // the file ends in a hole: its size is set at close
}

// zeros is what a run of zeros is compared with.
var zeros [128 << 10]byte

// minHole is the shortest run of zeros left as a hole: a filesystem
// block.
const minHole = 4 << 10

func allZero(p []byte) bool {
	for len(p) > 0 {
		n := min(len(p), len(zeros))
		if !bytes.Equal(p[:n], zeros[:n]) {
			return false
		}
		p = p[n:]
	}
	return true
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if len(p) >= minHole && allZero(p) {
		if _, err := w.f.Seek(int64(len(p)), io.SeekCurrent); err != nil {
			return 0, err
		}
		w.written += int64(len(p))
		w.hole = true
		return len(p), nil
	}
	w.hole = false
	n, err := w.f.Write(p)
	w.written += int64(n)
	if w.writeback && w.written-w.started >= writeback {
		startWriteback(w.fd, w.started, w.written-w.started)
		w.started = w.written
	}
	return n, err
}

// close gives a file that ends in a hole its size.
func (w *fileWriter) close() error {
	if w.hole {
		return unix.Ftruncate(w.fd, w.written)
	}
	return nil
}

// setMeta applies ownership, mode and xattrs. With an empty base, fd is
// the object itself (a file or directory opened for this); otherwise the
// object is base inside directory fd and is not followed if a symlink.
func (a *applier) setMeta(fd int, base string, hdr *tar.Header, isOpen bool) error {
	symlink := hdr.Typeflag == tar.TypeSymlink
	if base == "" {
		if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
		// After chown, which clears set-id bits.
		if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	} else {
		if err := unix.Fchownat(fd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
		if !symlink {
			if err := unix.Fchmodat(fd, base, uint32(hdr.Mode&0o7777), 0); err != nil {
				return fmt.Errorf("chmod: %w", err)
			}
		}
	}
	for key, value := range hdr.PAXRecords {
		attr, ok := strings.CutPrefix(key, paxXattr)
		if !ok {
			continue
		}
		// overlay acts on its own xattrs in lower layers (redirects,
		// metacopy); only the whiteout conversion above may create them.
		if strings.HasPrefix(attr, overlayXattr) {
			a.log.Debug("ignoring overlay xattr from layer", "entry", hdr.Name, "xattr", attr)
			continue
		}
		var err error
		if base == "" {
			err = unix.Fsetxattr(fd, attr, []byte(value), 0)
		} else {
			err = unix.Lsetxattr(procPath(fd, base), attr, []byte(value), 0)
		}
		if err != nil {
			// Some filesystems lack some namespaces, and user.* is not
			// allowed on symlinks or devices: the image is still usable.
			if errors.Is(err, unix.ENOTSUP) || (errors.Is(err, unix.EPERM) && !isOpen) {
				a.log.Warn("xattr not applied", "entry", hdr.Name, "xattr", attr, "error", err)
				continue
			}
			return fmt.Errorf("set xattr %s: %w", attr, err)
		}
	}
	return nil
}

func procPath(dirFD int, base string) string {
	return "/proc/self/fd/" + strconv.Itoa(dirFD) + "/" + base
}

func setXattrFD(fd int, attr, value string) error {
	if err := unix.Fsetxattr(fd, attr, []byte(value), 0); err != nil {
		return fmt.Errorf("set xattr %s: %w", attr, err)
	}
	return nil
}

func timespecs(hdr *tar.Header) []unix.Timespec {
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	return []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
}

func setTimes(dirFD int, base string, hdr *tar.Header) error {
	if err := unix.UtimesNanoAt(dirFD, base, timespecs(hdr), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// removeExisting deletes base in dirFD, recursively if it is a directory.
func (a *applier) removeExisting(dirFD int, base string) error {
	if err := removeAt(dirFD, base); err != nil {
		return fmt.Errorf("replace %s: %w", base, err)
	}
	return nil
}

func removeAt(dirFD int, base string) error {
	err := unix.Unlinkat(dirFD, base, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	err = unix.Unlinkat(dirFD, base, unix.AT_REMOVEDIR)
	if err == nil || !errors.Is(err, unix.ENOTEMPTY) {
		return err
	}
	fd, err := unix.Openat(dirFD, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), base)
	names, err := d.Readdirnames(-1)
	if err != nil {
		d.Close()
		return err
	}
	for _, n := range names {
		if err := removeAt(fd, n); err != nil {
			d.Close()
			return err
		}
	}
	d.Close()
	return unix.Unlinkat(dirFD, base, unix.AT_REMOVEDIR)
}

// finish sets directory times, now that nothing will be created in them.
func (a *applier) finish() error {
	a.dropCache()
	for i := len(a.dirs) - 1; i >= 0; i-- {
		d := a.dirs[i]
		hdr := &tar.Header{AccessTime: d.atime, ModTime: d.mtime}
		if d.name == "." {
			if err := unix.UtimesNanoAt(a.root, ".", timespecs(hdr), 0); err != nil {
				return fmt.Errorf("set times of layer root: %w", err)
			}
			continue
		}
		dir, base := path.Split(d.name)
		fd, err := openBeneath(a.root, path.Clean(dir), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			// Replaced or removed by a later entry: nothing to date.
			continue
		}
		err = unix.UtimesNanoAt(fd, base, timespecs(hdr), unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(fd)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("set times of %s: %w", d.name, err)
		}
	}
	return nil
}
