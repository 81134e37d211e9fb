package image

import (
	"context"
	"sync"
)

// flights runs one piece of work per key at a time and lets every caller
// asking for the same key wait for it, so that concurrent pulls sharing a
// layer download it once. Unlike x/sync/singleflight, the work runs on its
// own context, which is cancelled only when every waiter has given up: one
// caller's cancelled pull does not fail the others.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done    chan struct{}
	err     error
	waiters int
	cancel  context.CancelCauseFunc
}

// do runs fn for key unless a run is already in progress, and waits for
// the run's result or for ctx to end.
func (g *flights) do(ctx context.Context, key string, fn func(context.Context) error) error {
	g.mu.Lock()
	if g.m == nil {
		g.m = map[string]*flight{}
	}
	f, ok := g.m[key]
	if !ok {
		fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		g.m[key] = f
		go func() {
			err := fn(fctx)
			g.mu.Lock()
			if g.m[key] == f {
				delete(g.m, key)
			}
			f.err = err
			g.mu.Unlock()
			cancel(nil)
			close(f.done)
		}()
	}
	f.waiters++
	g.mu.Unlock()

	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		g.mu.Lock()
		f.waiters--
		last := f.waiters == 0
		if last {
			// Nobody wants the result any more. Forget the run so a new
			// caller starts afresh instead of joining one being torn down.
			if g.m[key] == f {
				delete(g.m, key)
			}
			f.cancel(context.Cause(ctx))
		}
		g.mu.Unlock()
		if last {
			// The run cleans up after itself; waiting for it means that
			// when the caller's failure is reported, its debris is gone.
			<-f.done
		}
		return context.Cause(ctx)
	}
}
