// Package fsguard runs filesystem operations that may never return (a
// FUSE server that stopped answering, a dead NFS server: the thread sits
// in the kernel and nothing can interrupt it) so that no caller waits past
// its deadline. The operation goes on in a goroutine that is left behind;
// a later call for the same operation and path waits for that one rather
// than starting another thread stuck beside it.
package fsguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-runtime/berth/internal/deadline"
)

// ErrBlocked is what an operation that did not return in time fails with.
// It is also a context.DeadlineExceeded, which callers map to their
// timeout codes.
var ErrBlocked = blockedError{}

type blockedError struct{}

func (blockedError) Error() string { return "the filesystem does not answer" }

func (blockedError) Is(target error) bool { return target == context.DeadlineExceeded }

// DefaultWait bounds the wait of a call whose context has no deadline.
const DefaultWait = 30 * time.Second

// Guard tracks the operations left behind. The zero value is not usable:
// make one with New.
type Guard struct {
	log  *slog.Logger
	wait time.Duration

	mu  sync.Mutex
	ops map[string]*op
}

type op struct {
	done  chan struct{}
	err   error
	since time.Time
	at    atomic.Pointer[string]
	late  atomic.Bool // a caller gave up on it
}

// New makes a guard; wait bounds calls whose context has no deadline (0:
// DefaultWait).
func New(log *slog.Logger, wait time.Duration) *Guard {
	if log == nil {
		log = slog.Default()
	}
	if wait <= 0 {
		wait = DefaultWait
	}
	return &Guard{log: log, wait: wait, ops: map[string]*op{}}
}

// Budget is how long a call under ctx may wait: until a little before its
// deadline, so the caller still has time to send the error that names the
// path; the guard's wait when ctx has none.
func (g *Guard) Budget(ctx context.Context) time.Duration {
	return deadline.Budget(ctx, g.wait)
}

// Do runs fn, the operation name on path, and waits for it at most
// Budget(ctx) or until ctx is done. fn may call at with the path it is on
// (a walk's current file), which the error and the log then name. An
// operation still running from an earlier call is waited for instead.
func (g *Guard) Do(ctx context.Context, name, path string, fn func(at func(string)) error) error {
	return g.DoWithin(ctx, g.Budget(ctx), name, path, fn)
}

// DoWithin is Do with a wait of at most wait.
func (g *Guard) DoWithin(ctx context.Context, wait time.Duration, name, path string, fn func(at func(string)) error) error {
	key := name + "\x00" + path
	g.mu.Lock()
	o, running := g.ops[key]
	if !running {
		o = &op{done: make(chan struct{}), since: time.Now()}
		g.ops[key] = o
	}
	g.mu.Unlock()
	if !running {
		go func() {
			err := fn(func(p string) { o.at.Store(&p) })
			o.err = err
			g.mu.Lock()
			delete(g.ops, key)
			g.mu.Unlock()
			close(o.done)
			if o.late.Load() {
				g.log.Warn("blocked filesystem operation returned", "op", name, "path", path,
					"took", time.Since(o.since).Round(time.Millisecond), "error", err)
			}
		}()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	var cause error
	select {
	case <-o.done:
		return o.err
	case <-t.C:
		cause = ErrBlocked
	case <-ctx.Done():
		cause = ctx.Err()
	}
	where := path
	if p := o.at.Load(); p != nil {
		where = *p
	}
	blocked := time.Since(o.since).Round(time.Millisecond)
	if !o.late.Swap(true) {
		g.log.Warn("filesystem operation blocked, left running", "op", name, "path", path, "at", where, "blocked", blocked)
	}
	return &Error{Op: name, Path: path, At: where, Blocked: blocked, Err: cause}
}

// Error is a blocked operation: what it is, where it is stuck, since when.
type Error struct {
	Op, Path, At string
	Blocked      time.Duration
	Err          error // ErrBlocked, or the caller's context's error
}

func (e *Error) Error() string {
	at := ""
	if e.At != "" && e.At != e.Path {
		at = " at " + e.At
	}
	return fmt.Sprintf("%s %s: no answer for %s%s (%v)", e.Op, e.Path, e.Blocked, at, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// IsBlocked reports whether err comes from an operation left behind.
func IsBlocked(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
