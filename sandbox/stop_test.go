package sandbox

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-runtime/berth/network"
)

// delayedDel attaches at once and takes a while to detach.
type delayedDel struct {
	release chan struct{}
	dels    atomic.Int32
}

func (d *delayedDel) Setup(context.Context, *network.Pod) (*network.Result, error) {
	return &network.Result{IPs: []net.IP{net.ParseIP("10.9.9.8")}}, nil
}
func (d *delayedDel) Teardown(ctx context.Context, _ *network.Pod) error {
	d.dels.Add(1)
	select {
	case <-d.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (d *delayedDel) GC(context.Context, map[string]bool) ([]string, error) { return nil, nil }
func (d *delayedDel) SetPodCIDRs([]string) error                            { return nil }

// TestStopAnswersWhileDELRuns: a stop whose CNI DEL outlasts the caller's
// deadline answers before it, naming the DEL; a stop retried meanwhile
// waits for the same DEL rather than starting another (or being cut off
// by its caller while it waits for the first stop); once the DEL is done
// the next stop finishes the pod.
func TestStopAnswersWhileDELRuns(t *testing.T) {
	nw := &delayedDel{release: make(chan struct{})}
	f := newFixture(t, nw)
	id, err := f.m.Run(context.Background(), f.config("slow-del"), "")
	if err != nil {
		t.Fatal(err)
	}
	stop := func(d time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		start := time.Now()
		err := f.m.Stop(ctx, id)
		return time.Since(start), err
	}

	// Two stops side by side, as a kubelet retrying a first one.
	type result struct {
		took time.Duration
		err  error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			took, err := stop(2 * time.Second)
			results <- result{took, err}
		}()
	}
	for range 2 {
		r := <-results
		if r.took > 2*time.Second {
			t.Errorf("stop answered after %s, deadline 2s", r.took)
		}
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("stop while DEL runs: %v, want DeadlineExceeded", r.err)
		}
		if msg := r.err.Error(); strings.Count(msg, id) != 1 {
			t.Errorf("stop while DEL runs: %q does not name the pod once", msg)
		}
		if msg := r.err.Error(); !strings.Contains(msg, id) ||
			!strings.Contains(msg, "CNI DEL still running") && !strings.Contains(msg, "StopPodSandbox of the pod still running") {
			t.Errorf("stop while DEL runs: %q names neither the DEL nor the stop holding the pod", msg)
		}
	}
	if _, err := stop(time.Second); !errors.Is(err, errDelRunning) {
		t.Errorf("third stop: %v, want the same DEL still running", err)
	}
	if n := nw.dels.Load(); n != 1 {
		t.Errorf("%d DELs started, want 1", n)
	}
	if st := f.status(id); st.State.String() != "SANDBOX_NOTREADY" {
		t.Errorf("pod %s while its DEL runs: %v, want not ready", id, st.State)
	}

	close(nw.release)
	if _, err := stop(5 * time.Second); err != nil {
		t.Fatalf("stop once the DEL is done: %v", err)
	}
	if n := nw.dels.Load(); n != 1 {
		t.Errorf("%d DELs in all, want 1", n)
	}
	if err := f.m.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}
