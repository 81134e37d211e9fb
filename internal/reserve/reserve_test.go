package reserve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewID()
		if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("id %q is not 64 hex digits", id)
		}
		if seen[id] {
			t.Fatalf("id %s made twice", id)
		}
		seen[id] = true
	}
}

// TestRetryWaitsAndGetsTheFirstObject: a call for a name being created
// waits and gets the first call's id; the create ran once.
func TestRetryWaitsAndGetsTheFirstObject(t *testing.T) {
	// Not Refuse: a caller scheduled after the first one got the id
	// would be a duplicate (TestCallerGivesUp checks that).
	n := New(Options{Kind: "pod sandbox"})
	release := make(chan struct{})
	var runs int
	create := func(ctx context.Context, id string) error {
		runs++
		<-release
		return nil
	}
	var wg sync.WaitGroup
	ids := make([]string, 3)
	errs := make([]error, 3)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], errs[i] = n.Create(context.Background(), "pod/a/0", create)
		}()
	}
	// Every caller is waiting before the create ends.
	for {
		if id, ok := n.Holder("pod/a/0"); ok && id != "" {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] || ids[i] == "" {
			t.Fatalf("caller %d: %q, %v; want %q", i, ids[i], errs[i], ids[0])
		}
	}
	if runs != 1 {
		t.Fatalf("create ran %d times", runs)
	}
}

// TestCallerGivesUp: the caller's deadline does not cut the create short;
// it is told the step; the retry gets the object, once.
func TestCallerGivesUp(t *testing.T) {
	for _, refuse := range []bool{true, false} {
		t.Run(fmt.Sprintf("refuse=%v", refuse), func(t *testing.T) {
			n := New(Options{Kind: "container", Refuse: refuse})
			proceed := make(chan struct{})
			stepped := make(chan struct{})
			var workErr error
			finished := make(chan struct{})
			create := func(ctx context.Context, id string) error {
				Step(ctx, "image lease")
				close(stepped)
				<-proceed
				workErr = ctx.Err()
				close(finished)
				return nil
			}
			// The caller gives up once the create is at its step.
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-stepped; cancel() }()
			_, err := n.Create(ctx, "x", create)
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `"image lease"`) {
				t.Fatalf("caller that gave up: %v, want its context's error naming the step", err)
			}
			first, _ := n.Holder("x")
			// A retry that gives up too is told the same.
			ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel2()
			if _, err := n.Create(ctx2, "x", create); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), first) {
				t.Fatalf("retry while running: %v", err)
			}
			close(proceed)
			<-finished
			if workErr != nil {
				t.Fatalf("the create's context ended with its caller: %v", workErr)
			}
			id, err := n.Create(context.Background(), "x", create)
			if err != nil || id != first {
				t.Fatalf("retry after the create: %q, %v; want %q", id, err, first)
			}
			id, err = n.Create(context.Background(), "x", create)
			if refuse && (!errors.Is(err, ErrTaken) || !strings.Contains(err.Error(), first)) {
				t.Fatalf("second retry once handed out: %v, want ErrTaken", err)
			}
			if !refuse && (err != nil || id != first) {
				t.Fatalf("second retry: %q, %v; want %q", id, err, first)
			}
		})
	}
}

func TestFailures(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		err       error
		freed     bool
		retryErr  error
		retryHits bool // the retry runs its own create
	}{
		{"failed and undone: the name is free", boom, true, nil, true},
		{"failed, not undone: held", Kept(fmt.Errorf("undo: %w", boom)), false, ErrTaken, false},
		{"failed, a part kept but undone by the create: free", fmt.Errorf("infra container: %w", Kept(boom)), true, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := New(Options{Kind: "pod sandbox"})
			var failed string
			_, err := n.Create(context.Background(), "p", func(ctx context.Context, id string) error {
				failed = id
				return tt.err
			})
			if !errors.Is(err, boom) {
				t.Fatalf("create: %v, want its error", err)
			}
			if _, held := n.Holder("p"); held == tt.freed {
				t.Fatalf("held after the failure: %v, want %v", held, !tt.freed)
			}
			ran := false
			id, err := n.Create(context.Background(), "p", func(ctx context.Context, id string) error { ran = true; return nil })
			if ran != tt.retryHits || !errors.Is(err, tt.retryErr) {
				t.Fatalf("retry: ran %v, %v; want ran %v, %v", ran, err, tt.retryHits, tt.retryErr)
			}
			if tt.retryErr != nil && !strings.Contains(err.Error(), failed) {
				t.Fatalf("retry's error %q does not name the kept object %s", err, failed)
			}
			if !tt.freed {
				n.Release("p", failed)
				if id, err = n.Create(context.Background(), "p", func(ctx context.Context, id string) error { return nil }); err != nil || id == failed {
					t.Fatalf("create after release: %q, %v", id, err)
				}
			}
		})
	}
}

// TestFailureWhileWaiting: the waiters of a create that fails and frees
// the name make their own (one of them; the rest get it).
func TestFailureWhileWaiting(t *testing.T) {
	n := New(Options{Kind: "container", Refuse: true})
	release := make(chan struct{})
	first := true
	var mu sync.Mutex
	create := func(ctx context.Context, id string) error {
		mu.Lock()
		f := first
		first = false
		mu.Unlock()
		if f {
			<-release
			return errors.New("first fails")
		}
		return nil
	}
	done := make(chan error, 2)
	ids := make(chan string, 2)
	for range 2 {
		go func() {
			id, err := n.Create(context.Background(), "c", create)
			ids <- id
			done <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	var ok []string
	for range 2 {
		id, err := <-ids, <-done
		if err == nil {
			ok = append(ok, id)
		}
	}
	if len(ok) == 0 {
		t.Fatal("no caller got an object after the first create failed")
	}
	if len(ok) == 2 && ok[0] != ok[1] {
		t.Fatalf("two objects for one name: %v", ok)
	}
}

func TestRestoreRelease(t *testing.T) {
	n := New(Options{Kind: "container", Refuse: true})
	n.Restore("c", "abc")
	if _, err := n.Create(context.Background(), "c", func(context.Context, string) error { return nil }); !errors.Is(err, ErrTaken) {
		t.Fatalf("restored name: %v, want ErrTaken", err)
	}
	n.Release("c", "other")
	if id, _ := n.Holder("c"); id != "abc" {
		t.Fatal("released by another id")
	}
	n.Release("c", "abc")
	if _, held := n.Holder("c"); held {
		t.Fatal("not released")
	}
	p := New(Options{Kind: "pod sandbox"})
	p.Restore("p", "def")
	if id, err := p.Create(context.Background(), "p", func(context.Context, string) error { return nil }); err != nil || id != "def" {
		t.Fatalf("restored pod: %q, %v; want def", id, err)
	}
}

// TestTimeout: the create's own timeout ends it.
func TestTimeout(t *testing.T) {
	n := New(Options{Kind: "container", Timeout: 20 * time.Millisecond})
	_, err := n.Create(context.Background(), "c", func(ctx context.Context, id string) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want the create's deadline", err)
	}
	if _, held := n.Holder("c"); held {
		t.Fatal("name held after a create that timed out")
	}
}
