package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

const (
	// maxArchiveMembers bounds the index kept in memory: docker save
	// writes four or five members per layer.
	maxArchiveMembers = 1 << 16
	// maxArchiveJSON bounds every JSON document read into memory (index,
	// manifests, configs, manifest.json).
	maxArchiveJSON = 8 << 20
	maxLinkHops    = 8
)

// archive is an image archive (a tar stream) spooled to a file of its own:
// the formats put their table of contents last (docker save writes
// manifest.json at the end), and only the table says which members are
// layers, so nothing can be unpacked while the stream goes by. The spool
// is an unlinked file: whatever happens, it leaves nothing behind.
//
// Members are never written to disk as files: the spool is one flat file,
// and a member is a range of it. Names, links and types are checked all
// the same, so that a hostile archive is refused as a whole rather than
// half-used.
type archive struct {
	f       *os.File
	members map[string]*member
}

type member struct {
	name      string
	off, size int64
	digest    v1.Hash // sha256 of the content, computed while spooling
	link      string  // a symbolic or hard link: the member it names
}

// spoolArchive copies the tar stream r into an unlinked temp file in dir,
// indexing and hashing every member on the way.
func spoolArchive(ctx context.Context, r io.Reader, dir string) (_ *archive, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", dir, err)
	}
	free := int64(st.Bavail) * st.Bsize
	f, err := os.CreateTemp(dir, tempPrefix+"import-")
	if err != nil {
		return nil, fmt.Errorf("create import spool: %w", err)
	}
	// Unlinked at once: the open file is all the import needs, and a crash
	// leaves nothing (load removes the name should it survive this line).
	os.Remove(f.Name())
	a := &archive{f: f, members: map[string]*member{}}
	defer func() {
		if err != nil {
			a.close()
		}
	}()

	tr := tar.NewReader(&ctxReader{ctx: ctx, r: r})
	var off int64
	buf := make([]byte, 256<<10)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w: the stream ended in the middle of the archive", ErrInvalidArchive)
			}
			return nil, fmt.Errorf("%w: %w", ErrInvalidArchive, err)
		}
		if len(a.members) >= maxArchiveMembers {
			return nil, fmt.Errorf("%w: more than %d members", ErrInvalidArchive, maxArchiveMembers)
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: member %q is out of the archive", ErrInvalidArchive, hdr.Name)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader || name == "." {
			continue
		}
		if _, dup := a.members[name]; dup {
			return nil, fmt.Errorf("%w: two members named %q", ErrInvalidArchive, name)
		}
		m := &member{name: name}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg, tar.TypeRegA:
			if hdr.Size < 0 || hdr.Size > free-off {
				return nil, fmt.Errorf("%w: member %q claims %d bytes, more than the %d free in %s", ErrInvalidArchive, name, hdr.Size, free-off, dir)
			}
			h := sha256.New()
			n, err := io.CopyBuffer(io.MultiWriter(f, h), tr, buf)
			if err != nil {
				if ctx.Err() != nil {
					return nil, context.Cause(ctx)
				}
				if errors.Is(err, io.ErrUnexpectedEOF) {
					return nil, fmt.Errorf("%w: the stream ended in the middle of member %q", ErrInvalidArchive, name)
				}
				return nil, fmt.Errorf("spool member %q: %w", name, err)
			}
			m.off, m.size = off, n
			m.digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
			off += n
		case tar.TypeSymlink:
			if path.IsAbs(hdr.Linkname) {
				return nil, fmt.Errorf("%w: member %q links to %q, out of the archive", ErrInvalidArchive, name, hdr.Linkname)
			}
			if m.link, err = cleanName(path.Join(path.Dir(name), hdr.Linkname)); err != nil {
				return nil, fmt.Errorf("%w: member %q links to %q, out of the archive", ErrInvalidArchive, name, hdr.Linkname)
			}
		case tar.TypeLink:
			if m.link, err = cleanName(hdr.Linkname); err != nil {
				return nil, fmt.Errorf("%w: member %q links to %q, out of the archive", ErrInvalidArchive, name, hdr.Linkname)
			}
		default:
			return nil, fmt.Errorf("%w: member %q is of tar type %q, which no image archive holds", ErrInvalidArchive, name, hdr.Typeflag)
		}
		a.members[name] = m
	}
	return a, nil
}

func (a *archive) close() { a.f.Close() }

// member finds a regular member by name, following links inside the
// archive. A missing member is (nil, nil).
func (a *archive) member(name string) (*member, error) {
	clean, err := cleanName(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidArchive, name, err)
	}
	m := a.members[clean]
	for hops := 0; m != nil && m.link != ""; hops++ {
		if hops == maxLinkHops {
			return nil, fmt.Errorf("%w: %q: too many links", ErrInvalidArchive, name)
		}
		target := a.members[m.link]
		if target == nil {
			return nil, fmt.Errorf("%w: %q links to %q, which the archive lacks", ErrInvalidArchive, name, m.link)
		}
		m = target
	}
	return m, nil
}

func (a *archive) has(name string) bool {
	m, err := a.member(name)
	return err == nil && m != nil
}

func (a *archive) reader(m *member) *io.SectionReader {
	return io.NewSectionReader(a.f, m.off, m.size)
}

// readJSON reads a member that holds a JSON document.
func (a *archive) readJSON(name string) ([]byte, *member, error) {
	m, err := a.member(name)
	if err != nil {
		return nil, nil, err
	}
	if m == nil {
		return nil, nil, fmt.Errorf("%w: it lacks %s", ErrInvalidArchive, name)
	}
	if m.size > maxArchiveJSON {
		return nil, nil, fmt.Errorf("%w: %s is %d bytes, more than the %d a JSON document may have", ErrInvalidArchive, name, m.size, maxArchiveJSON)
	}
	data := make([]byte, m.size)
	if _, err := a.f.ReadAt(data, m.off); err != nil {
		return nil, nil, fmt.Errorf("read %s from the import spool: %w", name, err)
	}
	return data, m, nil
}

// blob finds the member holding the content desc describes, in an OCI
// layout's blobs directory, and checks its digest and size.
func (a *archive) blob(desc v1.Descriptor) (*member, error) {
	if desc.Digest.Algorithm != "sha256" || len(desc.Digest.Hex) != 64 || !isHex(desc.Digest.Hex) {
		return nil, fmt.Errorf("%w: unsupported digest %q", ErrInvalidArchive, desc.Digest)
	}
	name := "blobs/sha256/" + desc.Digest.Hex
	m, err := a.member(name)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("%w: it lacks blob %s", ErrInvalidArchive, desc.Digest)
	}
	if m.digest != desc.Digest {
		return nil, fmt.Errorf("%w: blob %s has content of digest %s", ErrInvalidArchive, desc.Digest, m.digest)
	}
	if desc.Size != m.size {
		return nil, fmt.Errorf("%w: blob %s is %d bytes, its descriptor says %d", ErrInvalidArchive, desc.Digest, m.size, desc.Size)
	}
	return m, nil
}

// blobJSON is blob for a JSON document, read into memory.
func (a *archive) blobJSON(desc v1.Descriptor) ([]byte, error) {
	m, err := a.blob(desc)
	if err != nil {
		return nil, err
	}
	data, _, err := a.readJSON(m.name)
	return data, err
}

// ctxReader stops a copy from a stream when ctx ends, between reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}
