package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// epoch is the time stamp of every file in every layer and of every image
// config and history entry, so that a rebuild from the same inputs gives the
// same digests.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// A layerSource writes one layer as an uncompressed tar stream.
type layerSource interface {
	// key identifies the layer's content without building it, or is "" when
	// only the built tar (its sha256) identifies it.
	key() string
	// writeTar writes the layer. rootfs maps names to the -rootfs directories.
	writeTar(w io.Writer, rootfs map[string]string) error
	// describe is the image history's created_by for the layer.
	describe() string
}

// rootfsLayer is a whole directory tree given on the command line as
// -rootfs NAME=DIR (hack/build-images prepares it).
type rootfsLayer struct{ name string }

func (l rootfsLayer) key() string      { return "" }
func (l rootfsLayer) describe() string { return "rootfs " + l.name }

func (l rootfsLayer) writeTar(w io.Writer, rootfs map[string]string) error {
	dir, ok := rootfs[l.name]
	if !ok {
		return fmt.Errorf("no -rootfs %s=DIR given", l.name)
	}
	return tarDir(w, dir)
}

// tarDir writes the tree under dir (not dir itself) as a tar stream in lexical
// order, with the tree's modes (including setuid/setgid/sticky), owners,
// symlinks, and hard links as tar hard links to the first path of the inode.
// Time stamps are epoch; user and group names are left out (ids only).
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat_t", p)
		}
		hdr := &tar.Header{
			Name:    rel,
			Mode:    tarMode(fi.Mode()),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: epoch,
		}
		switch {
		case fi.Mode().IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case fi.Mode()&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			id := inode{uint64(st.Dev), st.Ino}
			if first, ok := seen[id]; ok && st.Nlink > 1 {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = first
				break
			}
			seen[id] = rel
			hdr.Typeflag = tar.TypeReg
			hdr.Size = fi.Size()
		default:
			return fmt.Errorf("%s: unsupported file type %s", p, fi.Mode().Type())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
			if n != hdr.Size {
				return fmt.Errorf("%s changed while being archived", p)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// entry is one tar entry of an entriesLayer.
type entry struct {
	path     string // no leading slash; directories without trailing slash
	kind     byte   // tar.TypeReg, TypeDir, TypeSymlink, TypeLink
	mode     int64  // permission bits with setuid/setgid/sticky; 0 means 0644 (files) or 0755 (dirs)
	uid, gid int    // owner
	data     string // file content
	target   string // link target (symlink: as written; hard link: the other entry's path)
}

func file(p, data string) entry        { return entry{path: p, kind: tar.TypeReg, data: data} }
func dir(p string) entry               { return entry{path: p, kind: tar.TypeDir} }
func symlink(p, to string) entry       { return entry{path: p, kind: tar.TypeSymlink, target: to} }
func hardlink(p, to string) entry      { return entry{path: p, kind: tar.TypeLink, target: to} }
func (e entry) withMode(m int64) entry { e.mode = m; return e }
func (e entry) owned(uid, gid int) entry {
	e.uid, e.gid = uid, gid
	return e
}

// whiteout deletes p (a file or a whole directory) of the layers below.
func whiteout(p string) entry {
	return file(path.Join(path.Dir(p), ".wh."+path.Base(p)), "")
}

// opaque hides everything the layers below have in directory p (the directory
// itself stays, with what this and later layers put in it).
func opaque(p string) entry { return file(path.Join(p, ".wh..wh..opq"), "") }

// entriesLayer is a layer declared entry by entry, in the order given
// (directories before what they contain).
type entriesLayer struct {
	comment string
	entries []entry
}

func (l entriesLayer) key() string      { return "" }
func (l entriesLayer) describe() string { return l.comment }

func (l entriesLayer) writeTar(w io.Writer, _ map[string]string) error {
	tw := tar.NewWriter(w)
	for _, e := range l.entries {
		hdr := &tar.Header{
			Typeflag: e.kind,
			Name:     strings.TrimPrefix(e.path, "/"),
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			ModTime:  epoch,
		}
		switch e.kind {
		case tar.TypeReg:
			if hdr.Mode == 0 {
				hdr.Mode = 0o644
			}
			hdr.Size = int64(len(e.data))
		case tar.TypeDir:
			if hdr.Mode == 0 {
				hdr.Mode = 0o755
			}
			hdr.Name += "/"
		case tar.TypeSymlink:
			hdr.Mode, hdr.Linkname = 0o777, e.target
		case tar.TypeLink:
			hdr.Linkname = strings.TrimPrefix(e.target, "/")
		default:
			return fmt.Errorf("%s: unsupported entry type %q", e.path, e.kind)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if e.kind == tar.TypeReg {
			if _, err := io.WriteString(tw, e.data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// randomLayer is one file of size bytes of seeded pseudo-random (so
// incompressible) data: the same seed always gives the same bytes (ChaCha8 is
// a specified generator), hence the same digests.
type randomLayer struct {
	path string
	seed uint64
	size int64
}

func (l randomLayer) key() string {
	return fmt.Sprintf("random-v1 %s %d %d", l.path, l.seed, l.size)
}

func (l randomLayer) describe() string {
	return fmt.Sprintf("%d random bytes (seed %d) in /%s", l.size, l.seed, l.path)
}

func (l randomLayer) writeTar(w io.Writer, _ map[string]string) error {
	tw := tar.NewWriter(w)
	if d := path.Dir(l.path); d != "." {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: l.path, Mode: 0o644, Size: l.size, ModTime: epoch}); err != nil {
		return err
	}
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], l.seed)
	if _, err := io.CopyN(tw, rand.NewChaCha8(seed), l.size); err != nil {
		return err
	}
	return tw.Close()
}

// writeTarFile writes the layer's tar into a new file in dir and returns its
// path and the hex sha256 of its content (the layer's diff ID).
func writeTarFile(dir string, src layerSource, rootfs map[string]string) (string, string, error) {
	f, err := os.CreateTemp(dir, "layer-*.tar")
	if err != nil {
		return "", "", err
	}
	h := sha256.New()
	err = src.writeTar(io.MultiWriter(f, h), rootfs)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", "", fmt.Errorf("layer %q: %w", src.describe(), err)
	}
	return f.Name(), hex.EncodeToString(h.Sum(nil)), nil
}
