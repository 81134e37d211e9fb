// Package reserve makes the ids of pods and containers and holds their
// names while they exist, with the kubelet's retries in mind.
//
// The kubelet gives up on a CreateContainer or RunPodSandbox after its
// runtime request timeout (2 min) and sends the same request again. A
// runtime that abandons the first call half-way, or answers the retry
// "name is reserved" until the first object is removed (containerd's
// "failed to reserve container name"), leaves the pod stuck. Here the
// work of the first call runs detached from its caller, bounded by a
// timeout of its own, and a later call for the same name waits for it and
// gets its object, or is told, when it too gives up, which step the work
// is at. CRI-O does the same.
package reserve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/berth-runtime/berth/internal/errdefs"
)

// NewID returns a new object id: 64 hex digits (256 random bits), the form
// crictl shortens to its first 13.
func NewID() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var (
	// ErrTaken: the name belongs to an object that exists and was already
	// handed to a caller (a duplicate, not a retry), or to one whose
	// create failed and could not be undone, kept until it is removed.
	ErrTaken = errdefs.New("name is reserved", errdefs.ErrAlreadyExists)
	// ErrKept: errors.Is holds for every error made by Kept.
	ErrKept = errors.New("kept for cleanup")
)

// Kept marks err, returned by a create, as one after which the object
// still exists (its undo failed): its name stays taken until Release, so
// that no retry makes a second object beside the one still to be cleaned
// up. Only the error create returns counts, not one it wraps: a pod whose
// infra container was kept, but which undid it in turn, frees its name.
func Kept(err error) error { return &keptError{err} }

type keptError struct{ err error }

func (e *keptError) Error() string {
	return e.err.Error() + " (kept for cleanup: its name stays taken until it is removed)"
}
func (e *keptError) Unwrap() error        { return e.err }
func (e *keptError) Is(target error) bool { return target == ErrKept }

func isKept(err error) bool {
	_, ok := err.(*keptError)
	return ok
}

// Options configure Names.
type Options struct {
	// Kind names the objects in errors and logs: "pod sandbox",
	// "container".
	Kind string
	// Timeout bounds one create, which goes on after its caller gave up.
	Timeout time.Duration
	// Refuse: a call for the name of an object already handed to a caller
	// gets ErrTaken (containers, as CRI-O: a real duplicate is a bug of
	// the caller). Otherwise it gets that object (pods).
	Refuse bool
	Logger *slog.Logger
}

// Names is the set of names of one kind of object.
type Names struct {
	opts Options
	mu   sync.Mutex
	m    map[string]*claim
}

// claim is one name, held by the object id. done is closed when the
// create has finished: then err is nil (the object exists) or why not.
type claim struct {
	id      string
	started time.Time
	done    chan struct{}
	err     error

	// Guarded by Names.mu.
	step string
	// delivered: a caller got the id, so a later call is no retry.
	delivered bool
}

// New returns an empty set.
func New(opts Options) *Names {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Timeout == 0 {
		opts.Timeout = 4 * time.Minute
	}
	return &Names{opts: opts, m: map[string]*claim{}}
}

type claimKey struct{}

// Step records the step the create running under ctx has reached, for the
// message a caller that gives up waiting gets. Outside a create it does
// nothing.
func Step(ctx context.Context, step string) {
	if sc, ok := ctx.Value(claimKey{}).(stepper); ok {
		sc.n.mu.Lock()
		sc.c.step = step
		sc.n.mu.Unlock()
	}
}

type stepper struct {
	n *Names
	c *claim
}

// Create returns the object named name, making it with create (given a new
// id) if no call has, and waiting for the call that is making it. create
// runs detached from ctx, with the set's timeout: the caller returns when
// ctx ends, with an error wrapping ctx's naming the step create is at, and a
// retry later gets the object. An error from create frees the name, unless
// Kept made it.
func (n *Names) Create(ctx context.Context, name string, create func(ctx context.Context, id string) error) (string, error) {
	for {
		c, mine, err := n.claim(name)
		if err != nil {
			return "", err
		}
		if mine {
			go n.run(ctx, name, c, create)
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			n.mu.Lock()
			step := c.step
			n.mu.Unlock()
			return "", fmt.Errorf("%s %s (name %s): gave up waiting after %s, the create goes on (at step %q), and a retry gets it: %w",
				n.opts.Kind, c.id, name, time.Since(c.started).Round(time.Millisecond), step, ctx.Err())
		}
		if c.err == nil {
			n.mu.Lock()
			c.delivered = true
			n.mu.Unlock()
			if !mine {
				n.opts.Logger.Info("create retried: returning the object of the first call", "kind", n.opts.Kind, "id", c.id, "name", name)
			}
			return c.id, nil
		}
		if mine || isKept(c.err) {
			return "", c.err
		}
		// The first call failed and freed the name: try again ourselves.
	}
}

// claim returns the claim on name and whether the caller made it (and so
// must run the create), or ErrTaken.
func (n *Names) claim(name string) (*claim, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.m[name]; ok {
		select {
		case <-c.done:
			switch {
			case c.err != nil:
				return nil, false, fmt.Errorf("%w: %s is held by %s %s, whose create failed and could not be undone: stop and remove it first (%w)",
					ErrTaken, name, n.opts.Kind, c.id, c.err)
			case c.delivered && n.opts.Refuse:
				return nil, false, fmt.Errorf("%w: %s is already used by %s %s", ErrTaken, name, n.opts.Kind, c.id)
			}
		default:
		}
		return c, false, nil
	}
	c := &claim{id: NewID(), started: time.Now(), done: make(chan struct{}), step: "starting"}
	n.m[name] = c
	return c, true, nil
}

func (n *Names) run(ctx context.Context, name string, c *claim, create func(context.Context, string) error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.opts.Timeout)
	defer cancel()
	wctx = context.WithValue(wctx, claimKey{}, stepper{n, c})
	err := create(wctx, c.id)
	n.mu.Lock()
	defer n.mu.Unlock()
	c.err = err
	if err != nil && !isKept(err) && n.m[name] == c {
		delete(n.m, name)
	}
	close(c.done)
}

// Restore holds name for id, an object loaded at start: as handed to a
// caller, since nobody can tell.
func (n *Names) Restore(name, id string) {
	c := &claim{id: id, started: time.Now(), done: make(chan struct{}), delivered: true}
	close(c.done)
	n.mu.Lock()
	n.m[name] = c
	n.mu.Unlock()
}

// Release frees name if object id holds it and its create has finished.
func (n *Names) Release(name, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.m[name]; ok && c.id == id {
		select {
		case <-c.done:
			delete(n.m, name)
		default:
		}
	}
}

// Holder is the id of the object holding name, if one does.
func (n *Names) Holder(name string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.m[name]
	if !ok {
		return "", false
	}
	return c.id, true
}
