package container

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
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
}

// describe is config.dump of the container rec (cfg its CRI config).
func describe(rec *Record, cfg *runtimeapi.ContainerConfig, at time.Time) *checkpointConfig {
	image := cfg.GetImage().GetUserSpecifiedImage()
	if image == "" {
		image = cfg.GetImage().GetImage()
	}
	return &checkpointConfig{
		ID: rec.ID, Name: cfg.GetMetadata().GetName(), PodID: rec.PodID,
		RootfsImage: image, RootfsImageRef: rec.ImageID, RootfsImageName: rec.ImageRef,
		OCIRuntime: "berth", CreatedTime: time.Unix(0, rec.CreatedAt).UTC(), CheckpointedAt: at.UTC(),
	}
}

// writeRootfsDiff writes dir/rootfs-diff.tar, the files, directories and
// links of the overlay upper layer under upper, and dir/deleted.files,
// the paths its whiteouts (0:0 character devices) delete, if any. The
// layer is read as it is at this moment, while the container runs on.
func writeRootfsDiff(upper, dir string) error {
	root := filepath.Join(upper, "upper")
	f, err := os.Create(filepath.Join(dir, rootfsDiff))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	var deleted []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if whiteout(fi) {
			deleted = append(deleted, rel)
			return nil
		}
		return addEntry(tw, path, rel, fi)
	})
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

// whiteout tells an overlay whiteout: a character device 0:0.
func whiteout(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0
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
