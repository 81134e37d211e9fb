package faults_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// loadRecord counts every call of the load by RPC: how many, how each ended,
// how long they took, and the calls that ended in a way nobody expected
// (each one fails the test).
type loadRecord struct {
	mu         sync.Mutex
	rpcs       map[string]*loadRPC
	unexpected []string
	total      int
}

type loadRPC struct {
	codes     map[codes.Code]int
	latencies []time.Duration
}

// loadMaxUnexpected bounds the failures kept for the report: after a few
// dozen the rest say nothing new.
const loadMaxUnexpected = 40

func newLoadRecord() *loadRecord { return &loadRecord{rpcs: map[string]*loadRPC{}} }

// add counts one call of rpc that ended with err after d; want is the code
// it should have ended with (OK for a call that should succeed).
func (r *loadRecord) add(rpc string, want codes.Code, d time.Duration, err error) {
	got := status.Code(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := r.rpcs[rpc]
	if rr == nil {
		rr = &loadRPC{codes: map[codes.Code]int{}}
		r.rpcs[rpc] = rr
	}
	rr.codes[got]++
	rr.latencies = append(rr.latencies, d)
	r.total++
	if got != want {
		r.failf("%s: %v, want %s", rpc, err, want)
	}
}

// fail records a call that answered OK with the wrong content.
func (r *loadRecord) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failf(format, args...)
}

func (r *loadRecord) failf(format string, args ...any) {
	if len(r.unexpected) < loadMaxUnexpected {
		r.unexpected = append(r.unexpected, fmt.Sprintf(format, args...))
	} else if len(r.unexpected) == loadMaxUnexpected {
		r.unexpected = append(r.unexpected, "(more left out)")
	}
}

func (r *loadRecord) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.unexpected)
}

func (r *loadRecord) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// summary is one line per RPC: calls, answers by code, p50 and p99.
func (r *loadRecord) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.rpcs))
	for n := range r.rpcs {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%-38s %7s %9s %9s  %s\n", "rpc", "calls", "p50", "p99", "codes")
	for _, n := range names {
		rr := r.rpcs[n]
		slices.Sort(rr.latencies)
		var cs []string
		for c, k := range rr.codes {
			cs = append(cs, fmt.Sprintf("%s=%d", c, k))
		}
		sort.Strings(cs)
		fmt.Fprintf(&b, "%-38s %7d %9s %9s  %s\n", n, len(rr.latencies),
			loadQuantile(rr.latencies, 0.50), loadQuantile(rr.latencies, 0.99), strings.Join(cs, " "))
	}
	return b.String()
}

// loadQuantile is the q-quantile of sorted durations, rounded for reading.
func loadQuantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	d := sorted[int(q*float64(len(sorted)-1))]
	switch {
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
