// Package store keeps berth's object records (pods, containers, images) as
// one JSON file per object. Every write is atomic: a crash leaves either the
// old record or the new one, never a mix, so the daemon can always rebuild
// its in-memory index from disk at start.
//
// Every record carries the format version of its kind ("formatVersion", a
// top-level key beside the record's own): a berth reads the versions it
// knows, migrates older ones through the steps it was given, and leaves a
// record of a version it cannot read where it is, untouched, instead of
// guessing at it (a newer berth wrote it, and may run again).
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	recordSuffix  = ".json"
	tempPrefix    = ".tmp-"
	corruptSuffix = ".corrupt"
)

// Records is a directory of records of one kind, keyed by object id.
// It does no locking: callers serialise writes to one id, as they already
// do for the object itself.
type Records[T any] struct {
	dir      string
	volatile bool
	version  int
	migrate  map[int]Migration
}

// Option changes how a record set is written.
type Option func(*options)

type options struct {
	volatile bool
	version  int
	migrate  map[int]Migration
}

// Migration rewrites a record of one format version (the JSON berth wrote,
// formatVersion included) into the next version's.
type Migration func(data []byte) ([]byte, error)

// Version sets the format version records of this kind are written with
// (1 when not given). steps[v] turns a record of version v into one of
// v+1; a record older than version with a step missing on its way is
// refused like one of a newer version.
func Version(version int, steps map[int]Migration) Option {
	return func(o *options) { o.version, o.migrate = version, steps }
}

// unversioned is the version of a record without formatVersion: the
// records berth wrote before versions existed, read as version 1.
const unversioned = 1

// versionKey is the top-level key holding a record's format version.
const versionKey = "formatVersion"

// VersionError is a record of a format version this berth cannot read:
// newer than the version it writes, or older with no migration to it.
type VersionError struct {
	Path       string
	Have, Want int
}

func (e *VersionError) Error() string {
	if e.Have > e.Want {
		return fmt.Sprintf("record %s has format version %d, newer than version %d, the newest this berth reads (written by a newer berth?): left as it is", e.Path, e.Have, e.Want)
	}
	return fmt.Sprintf("record %s has format version %d, and this berth cannot migrate it to version %d: left as it is", e.Path, e.Have, e.Want)
}

// Volatile is for records that a reboot makes meaningless: those of pods
// and containers (which do not survive a reboot) and whatever only lives
// as long as they do. They are still written atomically (temp file, then
// rename), so a crash of the daemon leaves the old record or the new one,
// and since the page cache outlives the process nothing written is lost;
// but they are not fsync'd, which only guards against a power cut or a
// kernel crash, after which the objects they describe are gone anyway.
// An fsync costs milliseconds on a disk (4 ms here on ext4 over virtio),
// and a pod start writes several records: on a node's tmpfs /run it is
// free, on a disk-backed one it is most of berth's own share of the time.
func Volatile(o *options) { o.volatile = true }

// Corrupt describes a record that could not be decoded at load time. It is
// renamed aside (never deleted) so that an operator can inspect it.
type Corrupt struct {
	ID   string
	Path string // where the unreadable bytes were moved
	Err  error
	// Kept: the record is of a format version this berth cannot read
	// (Err is a *VersionError). It stays at Path, untouched, and its id
	// must be treated as taken: what it names may well exist.
	Kept bool
}

// Open creates dir if needed and returns the record set stored in it.
func Open[T any](dir string, opts ...Option) (*Records[T], error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.version == 0 {
		o.version = unversioned
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create record dir %s: %w", dir, err)
	}
	return &Records[T]{dir: dir, volatile: o.volatile, version: o.version, migrate: o.migrate}, nil
}

// Dir is the directory that holds the records.
func (r *Records[T]) Dir() string { return r.dir }

func validID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || strings.HasPrefix(id, ".") {
		return fmt.Errorf("invalid record id %q", id)
	}
	return nil
}

func (r *Records[T]) path(id string) string {
	return filepath.Join(r.dir, id+recordSuffix)
}

// Put writes the record for id: temp file, fsync, rename over the old
// record, fsync the directory so the rename itself survives a power cut.
// Volatile records skip both fsyncs.
func (r *Records[T]) Put(id string, v *T) error {
	if err := validID(id); err != nil {
		return err
	}
	data, err := r.encode(v)
	if err != nil {
		return fmt.Errorf("encode record %s: %w", id, err)
	}
	tmp, err := os.CreateTemp(r.dir, tempPrefix+id+"-*")
	if err != nil {
		return fmt.Errorf("write record %s: %w", id, err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write record %s: %w", id, err)
	}
	if !r.volatile {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("sync record %s: %w", id, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close record %s: %w", id, err)
	}
	if err := os.Rename(tmp.Name(), r.path(id)); err != nil {
		return fmt.Errorf("commit record %s: %w", id, err)
	}
	committed = true
	return r.syncDir()
}

// Get reads one record. A missing record is reported with os.ErrNotExist.
func (r *Records[T]) Get(id string) (*T, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	v, _, err := r.get(id)
	return v, err
}

// get reads one record, migrated to the current version if it was older
// (migrated says so).
func (r *Records[T]) get(id string) (v *T, migrated bool, err error) {
	data, err := os.ReadFile(r.path(id))
	if err != nil {
		return nil, false, fmt.Errorf("read record %s: %w", id, err)
	}
	var head struct {
		Version *int `json:"formatVersion"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, false, fmt.Errorf("decode record %s: %w", id, err)
	}
	have := unversioned
	if head.Version != nil {
		have = *head.Version
	}
	for v := have; v < r.version; v++ {
		step := r.migrate[v]
		if step == nil || have < unversioned {
			return nil, false, &VersionError{Path: r.path(id), Have: have, Want: r.version}
		}
		if data, err = step(data); err != nil {
			return nil, false, fmt.Errorf("migrate record %s from format version %d to %d: %w", r.path(id), v, v+1, err)
		}
	}
	if have > r.version {
		return nil, false, &VersionError{Path: r.path(id), Have: have, Want: r.version}
	}
	v = new(T)
	if err := json.Unmarshal(data, v); err != nil {
		return nil, false, fmt.Errorf("decode record %s: %w", id, err)
	}
	return v, have < r.version, nil
}

// encode is v's JSON object with formatVersion first.
func (r *Records[T]) encode(v *T) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(data) < 2 || data[0] != '{' {
		return nil, fmt.Errorf("a record must encode as a JSON object, not %.20s", data)
	}
	out := fmt.Appendf(nil, "{%q:%d", versionKey, r.version)
	if rest := data[1:]; len(rest) > 1 {
		out = append(out, ',')
		out = append(out, rest...)
	} else {
		out = append(out, '}')
	}
	return out, nil
}

// Delete removes the record for id. Deleting a missing record succeeds,
// because removal paths must be idempotent.
func (r *Records[T]) Delete(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := os.Remove(r.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete record %s: %w", id, err)
	}
	return r.syncDir()
}

func (r *Records[T]) syncDir() error {
	if r.volatile {
		return nil
	}
	return syncDir(r.dir)
}

// LoadAll reads every record. Temp files left by a write that a crash
// interrupted are removed: the record they were replacing is still intact.
// A record that does not decode is moved aside and reported in the second
// result instead of failing the whole load, so one damaged file cannot keep
// the daemon from starting. A record of a format version this berth cannot
// read is reported too (Kept), and left where it is; one of an older
// version is migrated and written back in the current one.
func (r *Records[T]) LoadAll() (map[string]*T, []Corrupt, error) {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list records in %s: %w", r.dir, err)
	}
	records := make(map[string]*T, len(entries))
	var corrupt []Corrupt
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, tempPrefix):
			if err := os.Remove(filepath.Join(r.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, nil, fmt.Errorf("remove torn record %s: %w", name, err)
			}
			continue
		case e.IsDir() || !strings.HasSuffix(name, recordSuffix):
			continue
		}
		id := strings.TrimSuffix(name, recordSuffix)
		v, migrated, err := r.get(id)
		if err == nil {
			if migrated {
				if err := r.Put(id, v); err != nil {
					return nil, nil, fmt.Errorf("write back migrated record %s: %w", id, err)
				}
			}
			records[id] = v
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var ve *VersionError
		if errors.As(err, &ve) {
			corrupt = append(corrupt, Corrupt{ID: id, Path: r.path(id), Err: err, Kept: true})
			continue
		}
		aside := filepath.Join(r.dir, id+corruptSuffix)
		if rerr := os.Rename(r.path(id), aside); rerr != nil {
			return nil, nil, fmt.Errorf("move aside corrupt record %s: %w", id, rerr)
		}
		corrupt = append(corrupt, Corrupt{ID: id, Path: aside, Err: err})
	}
	return records, corrupt, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
