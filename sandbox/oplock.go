package sandbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-runtime/berth/internal/deadline"
)

// opLock serialises the operations that change a pod. Unlike a mutex, a
// caller can give up waiting for it: a stop that the kubelet retries
// while the first one still waits for a slow CNI DEL must answer by its
// deadline, saying what it waited for, not be cut off by its caller. The
// zero value is unlocked.
type opLock struct {
	once  sync.Once
	ch    chan struct{}
	what  atomic.Pointer[string] // the holder's operation
	since atomic.Int64           // when the holder took it, unix ns
}

func (l *opLock) c() chan struct{} {
	l.once.Do(func() { l.ch = make(chan struct{}, 1) })
	return l.ch
}

// Lock takes the lock for the operation what, waiting as long as it takes.
func (l *opLock) Lock(what string) {
	l.c() <- struct{}{}
	l.held(what)
}

// LockCtx takes the lock for the operation what, waiting until shortly
// before ctx's deadline; it then fails naming what holds the lock.
func (l *opLock) LockCtx(ctx context.Context, what string) error {
	t := time.NewTimer(deadline.Budget(ctx, 24*time.Hour))
	defer t.Stop()
	select {
	case l.c() <- struct{}{}:
		l.held(what)
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	holder, since := "an earlier call", time.Duration(0)
	if p := l.what.Load(); p != nil {
		holder = *p
	}
	if ns := l.since.Load(); ns != 0 {
		since = time.Since(time.Unix(0, ns)).Round(time.Millisecond)
	}
	return fmt.Errorf("%w: %s of the pod still running (for %s)", context.DeadlineExceeded, holder, since)
}

func (l *opLock) held(what string) {
	l.what.Store(&what)
	l.since.Store(time.Now().UnixNano())
}

// Unlock releases the lock.
func (l *opLock) Unlock() { <-l.c() }
