package image

import (
	"context"
	"sync"
)

// flights runs one piece of work per key at a time and lets every caller
// asking for the same key wait for it, so that concurrent pulls sharing a
// layer download it once. Unlike x/sync/singleflight, the work runs on its
// own context, which is cancelled only when every waiter has given up: one
// caller's cancelled pull does not fail the others. T is what the work
// answers every waiter (an image ID for whole pulls).
type flights[T any] struct {
	mu sync.Mutex
	m  map[string]*flight[T]
}

type flight[T any] struct {
	done    chan struct{}
	val     T
	err     error
	waiters int
	cancel  context.CancelCauseFunc
}

// do runs fn for key unless a run is already in progress, and waits for
// the run's result or for ctx to end.
func (g *flights[T]) do(ctx context.Context, key string, fn func(context.Context) (T, error)) (T, error) {
	g.mu.Lock()
	if g.m == nil {
		g.m = map[string]*flight[T]{}
	}
	f, ok := g.m[key]
	if !ok {
		fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		f = &flight[T]{done: make(chan struct{}), cancel: cancel}
		g.m[key] = f
		go func() {
			val, err := fn(fctx)
			g.mu.Lock()
			if g.m[key] == f {
				delete(g.m, key)
			}
			f.val, f.err = val, err
			g.mu.Unlock()
			cancel(nil)
			close(f.done)
		}()
	}
	f.waiters++
	g.mu.Unlock()

	select {
	case <-f.done:
		return f.val, f.err
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
		var zero T
		return zero, context.Cause(ctx)
	}
}

// doErr is do for work that answers nothing but its error.
func doErr(ctx context.Context, g *flights[struct{}], key string, fn func(context.Context) error) error {
	_, err := g.do(ctx, key, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}
