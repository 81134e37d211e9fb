// Package idindex finds pods, containers and images by their id or by a
// prefix of it, as crictl users type them. It is the one place that
// decides what a prefix means, so that every CRI call taking an id
// answers alike: a prefix that begins no id is missing (Stop and Remove
// take that as done), one that begins several is the caller's mistake,
// never a silent pick and never "not found", since the object asked for
// may well exist.
package idindex

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/berth-runtime/berth/internal/errdefs"
)

var (
	// ErrNotFound: no id is, or begins with, the one asked for.
	ErrNotFound = errdefs.New("no such id", errdefs.ErrNotFound)
	// ErrAmbiguous: several ids begin with the one asked for. Every
	// *AmbiguousError is one.
	ErrAmbiguous = errdefs.New("ambiguous id prefix", errdefs.ErrInvalidArgument)
)

// listed caps the candidates an error names: a one-digit prefix on a busy
// node begins dozens of ids, and the first few are enough to pick from.
const listed = 8

// AmbiguousError is a prefix that begins more than one id.
type AmbiguousError struct {
	Prefix string
	IDs    []string // every id the prefix begins, sorted
}

func (e *AmbiguousError) Error() string {
	ids := e.IDs
	more := ""
	if len(ids) > listed {
		ids, more = ids[:listed], fmt.Sprintf(" and %d more", len(e.IDs)-listed)
	}
	return fmt.Sprintf("id prefix %q is ambiguous: %d ids begin with it: %s%s", e.Prefix, len(e.IDs), strings.Join(ids, ", "), more)
}

// Is makes errors.Is(err, ErrAmbiguous) hold, and so that of its class.
func (e *AmbiguousError) Is(target error) bool { return errors.Is(ErrAmbiguous, target) }

// Find returns the id and value of all whose id is id, or else of the
// only one id is a prefix of. An empty id, or one no id begins with, is
// ErrNotFound; one that begins several ids is an *AmbiguousError naming
// them. all is read in full unless id is found whole, so callers with a
// map look the whole id up there first.
func Find[V any](all iter.Seq2[string, V], id string) (string, V, error) {
	var (
		zero  V
		ids   []string
		value V
	)
	if id == "" {
		return "", zero, fmt.Errorf("%w: empty id", ErrNotFound)
	}
	for full, v := range all {
		if full == id {
			return full, v, nil
		}
		if strings.HasPrefix(full, id) {
			if ids = append(ids, full); len(ids) == 1 {
				value = v
			}
		}
	}
	switch len(ids) {
	case 0:
		return "", zero, fmt.Errorf("%w: %s", ErrNotFound, id)
	case 1:
		return ids[0], value, nil
	}
	slices.Sort(ids)
	return "", zero, &AmbiguousError{Prefix: id, IDs: ids}
}

// Slice is the items of s by the id idOf gives each, for Find.
func Slice[T any](s []T, idOf func(*T) string) iter.Seq2[string, *T] {
	return func(yield func(string, *T) bool) {
		for i := range s {
			if !yield(idOf(&s[i]), &s[i]) {
				return
			}
		}
	}
}
