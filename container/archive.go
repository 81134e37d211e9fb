package container

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A checkpoint archive: an uncompressed tar laid out as CRI-O's, which
// checkpointctl and the kubelet's e2e test read.
const (
	checkpointDir = "checkpoint"      // CRIU's images (inventory.img, ...) and descriptors.json
	specDump      = "spec.dump"       // the container's OCI runtime spec, JSON
	configDump    = "config.dump"     // checkpointConfig, JSON
	dumpLog       = "dump.log"        // CRIU's log of the dump
	rootfsDiff    = "rootfs-diff.tar" // the files of the writable layer
	deletedFiles  = "deleted.files"   // JSON list of the paths the layer deletes
)

// checkpointConfig is config.dump: what the archive is of, with the
// field names of CRI-O's (checkpointctl's ContainerConfig).
type checkpointConfig struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	PodID           string    `json:"podId"`
	RootfsImage     string    `json:"rootfsImage,omitempty"`
	RootfsImageRef  string    `json:"rootfsImageRef,omitempty"`
	RootfsImageName string    `json:"rootfsImageName,omitempty"`
	OCIRuntime      string    `json:"runtime"`
	CreatedTime     time.Time `json:"createdTime"`
	CheckpointedAt  time.Time `json:"checkpointedTime"`
	// TCPEstablished (berth's own field) tells that CRIU dumped the
	// established TCP connections (tcp-established, a pod checkpoint's):
	// it restores them only when asked the same.
	TCPEstablished bool `json:"tcpEstablished,omitempty"`
}

// describe is config.dump of the container rec (cfg its CRI config),
// dumped with tcp-established where tcp is set.
func describe(rec *Record, cfg *runtimeapi.ContainerConfig, at time.Time, tcp bool) *checkpointConfig {
	image := cfg.GetImage().GetUserSpecifiedImage()
	if image == "" {
		image = cfg.GetImage().GetImage()
	}
	return &checkpointConfig{
		ID: rec.ID, Name: cfg.GetMetadata().GetName(), PodID: rec.PodID,
		RootfsImage: image, RootfsImageRef: rec.ImageID, RootfsImageName: rec.ImageRef,
		OCIRuntime: "berth", CreatedTime: time.Unix(0, rec.CreatedAt).UTC(), CheckpointedAt: at.UTC(),
		TCPEstablished: tcp,
	}
}

// writeRootfsDiff writes dir/rootfs-diff.tar, the files, directories,
// links, devices and FIFOs of the overlay upper layer under upper, and
// dir/deleted.files, the paths its whiteouts (0:0 character devices)
// delete, if any. The layer is read as it is at this moment, while the
// container runs on and may change it.
func writeRootfsDiff(upper, dir string) error {
	root, err := os.OpenFile(filepath.Join(upper, "upper"), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer root.Close()
	f, err := os.Create(filepath.Join(dir, rootfsDiff))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	var deleted []string
	err = tarLayer(tw, root, "", &deleted)
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || len(deleted) == 0 {
		return err
	}
	data, err := json.Marshal(deleted)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, deletedFiles), data, 0o600)
}

// tarLayer writes what the directory dir holds to tw, its names under
// prefix, and adds its whiteouts to deleted. It follows no symbolic link:
// each name is looked at and opened relative to its directory's
// descriptor with O_NOFOLLOW, so that a directory the container swaps
// for a link to the host's / meanwhile cannot bring the host's files in.
func tarLayer(tw *tar.Writer, dir *os.File, prefix string, deleted *[]string) error {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s/: %w", prefix, err)
	}
	slices.Sort(names)
	for _, name := range names {
		rel := path.Join(prefix, name)
		var st unix.Stat_t
		err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT):
			continue // removed meanwhile
		case err != nil:
			return fmt.Errorf("%s: %w", rel, err)
		case st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0:
			*deleted = append(*deleted, rel)
			continue
		case st.Mode&unix.S_IFMT == unix.S_IFSOCK:
			continue // a tar cannot hold one
		}
		if err := tarLayerEntry(tw, dir, name, rel, &st, deleted); err != nil {
			return err
		}
	}
	return nil
}

// tarLayerEntry writes the entry name of dir (rel in the layer), st its
// lstat.
func tarLayerEntry(tw *tar.Writer, dir *os.File, name, rel string, st *unix.Stat_t, deleted *[]string) error {
	h := layerHeader(rel, st)
	switch h.Typeflag {
	case tar.TypeSymlink:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		h.Linkname = string(buf[:n])
	case tar.TypeDir:
		sub, err := openIn(dir, name, unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		defer sub.Close()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		return tarLayer(tw, sub, rel, deleted)
	case tar.TypeReg:
		return tarLayerFile(tw, dir, name, h)
	}
	return tw.WriteHeader(h)
}

// tarLayerFile writes the regular file name of dir, h its header.
func tarLayerFile(tw *tar.Writer, dir *os.File, name string, h *tar.Header) error {
	// O_NONBLOCK: were it swapped for a FIFO, the open must not wait.
	f, err := openIn(dir, name, unix.O_NONBLOCK)
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: changed while read", h.Name)
	}
	h.Size = st.Size
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// A file that grows meanwhile is cut at the size seen; one that
	// shrinks fails the archive (its header promised more).
	if _, err := io.Copy(tw, io.LimitReader(f, h.Size)); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}

// openIn opens name in dir, never through a symbolic link.
func openIn(dir *os.File, name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// layerHeader is the tar header of a layer's entry: numeric owners only
// (names would be the host's, not the container's).
func layerHeader(rel string, st *unix.Stat_t) *tar.Header {
	h := &tar.Header{Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()), Format: tar.FormatPAX}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		h.Typeflag, h.Name = tar.TypeDir, rel+"/"
	case unix.S_IFLNK:
		h.Typeflag = tar.TypeSymlink
	case unix.S_IFCHR:
		h.Typeflag = tar.TypeChar
	case unix.S_IFBLK:
		h.Typeflag = tar.TypeBlock
	case unix.S_IFIFO:
		h.Typeflag = tar.TypeFifo
	default:
		h.Typeflag = tar.TypeReg
	}
	if h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
		h.Devmajor, h.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	}
	return h
}

// addEntry writes the file at path, named name, to tw: a directory, a
// regular file, a symbolic link, a device or a FIFO. Sockets are left
// out (a tar cannot hold one).
func addEntry(tw *tar.Writer, path, name string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSocket != 0 {
		return nil
	}
	var link string
	if fi.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = os.Readlink(path); err != nil {
			return err
		}
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name = filepath.ToSlash(name)
	if fi.IsDir() {
		h.Name += "/"
	}
	// Numeric owners only: the names are the host's, not the container's.
	h.Uname, h.Gname = "", ""
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// A file that grows meanwhile is cut at its size when it was seen.
	if _, err := io.Copy(tw, io.LimitReader(f, fi.Size())); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// writeArchive writes the checkpoint archive at location: files (name →
// content) first, then the tree under work. It goes to a temporary file
// beside location, renamed into place once complete: a failure leaves
// nothing at location, and a reader never sees half an archive.
func writeArchive(location, work string, files map[string][]byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(location), "."+filepath.Base(location)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp) // the file CreateTemp just made
		}
	}()
	tw := tar.NewWriter(f)
	now := time.Now()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		h := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(files[name])), ModTime: now, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(files[name]); err != nil {
			return err
		}
	}
	err = filepath.WalkDir(work, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == work {
			return err
		}
		rel, err := filepath.Rel(work, path)
		if err != nil {
			return err
		}
		if _, dup := files[rel]; dup {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return addEntry(tw, path, rel, fi)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, location)
}
