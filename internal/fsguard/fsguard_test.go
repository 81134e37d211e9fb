package fsguard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestDo(t *testing.T) {
	errOp := errors.New("op failed")
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		fn      func(release <-chan struct{}, at func(string)) error
		want    error
		blocked bool
	}{
		{"returns", background, func(<-chan struct{}, func(string)) error { return nil }, nil, false},
		{"fails", background, func(<-chan struct{}, func(string)) error { return errOp }, errOp, false},
		{"blocks past the deadline", withDeadline(300 * time.Millisecond), func(r <-chan struct{}, at func(string)) error {
			at("/x/stuck")
			<-r
			return nil
		}, context.DeadlineExceeded, true},
		{"blocks past the guard's wait", background, func(r <-chan struct{}, _ func(string)) error { <-r; return nil }, ErrBlocked, true},
		{"caller cancelled", cancelled, func(r <-chan struct{}, _ func(string)) error { <-r; return nil }, context.Canceled, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := New(slog.New(slog.NewTextHandler(io.Discard, nil)), 200*time.Millisecond)
			release := make(chan struct{})
			defer close(release)
			var calls atomic.Int32
			fn := func(at func(string)) error { calls.Add(1); return tt.fn(release, at) }
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			err := g.Do(ctx, "walk", "/x", fn)
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("Do took %s", took)
			}
			if !errors.Is(err, tt.want) || IsBlocked(err) != tt.blocked {
				t.Fatalf("Do: %v, want %v (blocked %v)", err, tt.want, tt.blocked)
			}
			if !tt.blocked {
				return
			}
			if !strings.Contains(err.Error(), "walk /x") {
				t.Errorf("error %q does not name the operation and path", err)
			}
			// A second call while the first is stuck joins it.
			if err := g.Do(context.Background(), "walk", "/x", fn); !IsBlocked(err) {
				t.Errorf("second Do: %v, want blocked", err)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("fn ran %d times while stuck, want 1", n)
			}
		})
	}
}

func TestDoAfterRelease(t *testing.T) {
	g := New(slog.New(slog.NewTextHandler(io.Discard, nil)), 100*time.Millisecond)
	release := make(chan struct{})
	var calls atomic.Int32
	fn := func(func(string)) error { calls.Add(1); <-release; return nil }
	if err := g.Do(context.Background(), "rm", "/y", fn); !IsBlocked(err) {
		t.Fatalf("Do: %v, want blocked", err)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := g.Do(context.Background(), "rm", "/y", fn); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Do still blocked after the operation was released")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := calls.Load(); n < 1 || n > 2 {
		t.Errorf("fn ran %d times", n)
	}
}

func background() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

func withDeadline(d time.Duration) func() (context.Context, context.CancelFunc) {
	return func() (context.Context, context.CancelFunc) { return context.WithTimeout(context.Background(), d) }
}

func cancelled() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	return ctx, cancel
}
