package container

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// archivePath tells whether a CreateContainer's image names a checkpoint
// archive to restore, and which. CRI-O's rule: the image is the path of
// an existing regular file. Here it must also be absolute: a relative one
// would be read against berth's working directory, where a file could
// bear the name of an image ("busybox").
func archivePath(image string) (string, bool) {
	if !filepath.IsAbs(image) {
		return "", false
	}
	fi, err := os.Stat(image)
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return image, true
}

// maxDumpFile bounds what of config.dump, spec.dump and deleted.files is
// read into memory.
const maxDumpFile = 16 << 20

// archiveName checks the name of an archive's entry (or of an entry of
// its rootfs-diff.tar): relative and inside, no "..", and returns it
// cleaned, without a trailing slash.
func archiveName(name string) (string, error) {
	clean := path.Clean(strings.TrimSuffix(name, "/"))
	if name == "" || path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") || strings.Contains(name, "\x00") {
		return "", fmt.Errorf("entry %q leaves the archive's directory", name)
	}
	for _, part := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if part == ".." {
			return "", fmt.Errorf("entry %q leaves the archive's directory", name)
		}
	}
	return clean, nil
}

// inspectArchive reads the checkpoint archive at location through once
// and returns its description (config.dump). An archive that is not one
// berth can restore is ErrInvalid naming what is wrong: a name that
// leaves its directory (in it or in its rootfs-diff.tar), an entry of a
// kind it cannot hold, config.dump, spec.dump or CRIU's images missing
// or unreadable.
func inspectArchive(location string) (*checkpointConfig, error) {
	f, err := os.Open(location)
	if err != nil {
		return nil, fmt.Errorf("%w: checkpoint archive %s: %w", ErrInvalid, location, err)
	}
	defer f.Close()
	cfg, err := scanArchive(tar.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%w: checkpoint archive %s: %w", ErrInvalid, location, err)
	}
	return cfg, nil
}

// scanArchive checks the entries of a checkpoint archive (inspectArchive).
func scanArchive(tr *tar.Reader) (*checkpointConfig, error) {
	var cfg *checkpointConfig
	seen := map[string]bool{}
	for h, err := range tarEntries(tr) {
		if err != nil {
			return nil, fmt.Errorf("not a tar archive: %w", err)
		}
		name, err := archiveName(h.Name)
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			return nil, fmt.Errorf("entry %q: neither a file nor a directory", h.Name)
		}
		seen[name] = true
		switch name {
		case configDump:
			if cfg, err = readConfigDump(tr); err != nil {
				return nil, err
			}
		case specDump:
			var spec struct {
				OCIVersion string `json:"ociVersion"`
			}
			if err := json.NewDecoder(io.LimitReader(tr, maxDumpFile)).Decode(&spec); err != nil || spec.OCIVersion == "" {
				return nil, fmt.Errorf("%s: not an OCI runtime spec (%v)", specDump, err)
			}
		case rootfsDiff:
			if err := scanRootfsDiff(tar.NewReader(tr)); err != nil {
				return nil, fmt.Errorf("%s: %w", rootfsDiff, err)
			}
		case deletedFiles:
			if _, err := readDeletedFiles(tr); err != nil {
				return nil, err
			}
		}
	}
	for _, want := range []string{configDump, specDump, path.Join(checkpointDir, "inventory.img"), path.Join(checkpointDir, "descriptors.json")} {
		if !seen[want] {
			return nil, fmt.Errorf("%s: missing (not a container checkpoint of CRI-O's layout)", want)
		}
	}
	return cfg, nil
}

// readConfigDump decodes config.dump, which must name the image the
// checkpointed container ran.
func readConfigDump(r io.Reader) (*checkpointConfig, error) {
	cfg := &checkpointConfig{}
	if err := json.NewDecoder(io.LimitReader(r, maxDumpFile)).Decode(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", configDump, err)
	}
	if cfg.RootfsImageRef == "" && cfg.RootfsImageName == "" && cfg.RootfsImage == "" {
		return nil, fmt.Errorf("%s: names no image (rootfsImageRef, rootfsImageName, rootfsImage)", configDump)
	}
	return cfg, nil
}

// readDeletedFiles decodes deleted.files, paths in the rootfs.
func readDeletedFiles(r io.Reader) ([]string, error) {
	var names []string
	if err := json.NewDecoder(io.LimitReader(r, maxDumpFile)).Decode(&names); err != nil {
		return nil, fmt.Errorf("%s: %w", deletedFiles, err)
	}
	for i, n := range names {
		clean, err := archiveName(n)
		if err != nil || clean == "." {
			return nil, fmt.Errorf("%s: %q is not a path in the rootfs", deletedFiles, n)
		}
		names[i] = clean
	}
	return names, nil
}

// scanRootfsDiff checks rootfs-diff.tar: names inside the rootfs, hard
// links to names inside it, kinds a layer holds.
func scanRootfsDiff(tr *tar.Reader) error {
	for h, err := range tarEntries(tr) {
		if err != nil {
			return err
		}
		if _, err := archiveName(h.Name); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		case tar.TypeLink:
			if _, err := archiveName(h.Linkname); err != nil {
				return fmt.Errorf("hard link %q: %w", h.Name, err)
			}
		default:
			return fmt.Errorf("entry %q: type %q is not one a layer holds", h.Name, h.Typeflag)
		}
	}
	return nil
}

// extractArchive extracts the checkpoint archive at location (checked by
// inspectArchive) into dst, a directory just made: files and directories
// only, each name checked again.
func extractArchive(location, dst string) error {
	f, err := os.Open(location)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for h, err := range tarEntries(tr) {
		if err != nil {
			return err
		}
		name, err := archiveName(h.Name)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o700)
		case tar.TypeReg:
			err = extractFile(tr, target, 0o600)
		default:
			err = fmt.Errorf("entry %q: neither a file nor a directory", h.Name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// extractFile writes r to a new file at target, its parents made.
func extractFile(r io.Reader, target string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// applyCheckpointRootfs brings the checkpointed container's writable
// layer into the rootfs mounted at rootfs (the image's layers under a new
// writable one): rootfs-diff.tar's entries written, deleted.files' paths
// removed, from the extracted archive in dir. Every path is resolved
// inside rootfs: a link of the image cannot lead a write outside.
func applyCheckpointRootfs(rootfs, dir string) error {
	if f, err := os.Open(filepath.Join(dir, rootfsDiff)); err == nil {
		err = applyRootfsDiff(rootfs, tar.NewReader(f))
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", rootfsDiff, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.Open(filepath.Join(dir, deletedFiles))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := readDeletedFiles(f)
	if err != nil {
		return err
	}
	for _, n := range names {
		target, err := inRootfs(rootfs, n)
		if err != nil {
			return err
		}
		// target is inside the container's rootfs (inRootfs).
		if err := os.RemoveAll(target); err != nil {
			return fmt.Errorf("%s: %w", deletedFiles, err)
		}
	}
	return nil
}

// inRootfs is name's path in rootfs: its directory resolved inside
// rootfs (symbolic links of the image followed as the container would),
// its last element not followed.
func inRootfs(rootfs, name string) (string, error) {
	clean, err := archiveName(name)
	if err != nil {
		return "", err
	}
	if clean == "." {
		return rootfs, nil
	}
	parent, err := securejoin.SecureJoin(rootfs, path.Dir(clean))
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, path.Base(clean)), nil
}

// applyRootfsDiff writes the entries of a layer's tar into rootfs.
func applyRootfsDiff(rootfs string, tr *tar.Reader) error {
	for h, err := range tarEntries(tr) {
		if err != nil {
			return err
		}
		target, err := inRootfs(rootfs, h.Name)
		if err != nil {
			return err
		}
		if err := applyEntry(rootfs, target, h, tr); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	return nil
}

// tarEntries yields a tar's headers in order, each entry's content then
// read from tr, and the error that ends it early: nothing at its end.
func tarEntries(tr *tar.Reader) iter.Seq2[*tar.Header, error] {
	return func(yield func(*tar.Header, error) bool) {
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) || !yield(h, err) || err != nil {
				return
			}
		}
	}
}

// applyEntry writes one entry h (its content in r) at target.
func applyEntry(rootfs, target string, h *tar.Header, r io.Reader) error {
	mode := os.FileMode(h.Mode & 0o7777)
	if h.Typeflag == tar.TypeDir {
		if fi, err := os.Lstat(target); err != nil || !fi.IsDir() {
			os.RemoveAll(target) // target is inside rootfs (inRootfs)
			if err := os.Mkdir(target, mode); err != nil {
				return err
			}
		}
	} else {
		if err := os.RemoveAll(target); err != nil { // inside rootfs (inRootfs)
			return err
		}
		var err error
		switch h.Typeflag {
		case tar.TypeReg:
			err = extractFile(r, target, mode)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, target)
		case tar.TypeLink:
			var old string
			if old, err = inRootfs(rootfs, h.Linkname); err == nil {
				err = os.Link(old, target)
			}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[h.Typeflag]
			err = unix.Mknod(target, kind|uint32(mode), int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))))
		default:
			err = fmt.Errorf("type %q is not one a layer holds", h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
	if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
		return nil
	}
	// After the owner: a chown drops the set-id bits.
	if err := os.Chmod(target, mode); err != nil {
		return err
	}
	return os.Chtimes(target, h.ModTime, h.ModTime)
}
