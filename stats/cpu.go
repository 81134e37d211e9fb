package stats

import (
	"sync"
	"time"
)

// minWindow is the shortest interval a CPU rate is computed over: callers
// asking more often get the last rate, not the noise of a tiny window.
const minWindow = time.Second

// forgetAfter drops the samples of objects nobody asked about for this
// long (they are gone).
const forgetAfter = 10 * time.Minute

// cpuRates turns cumulative CPU usage into usage_nano_cores, from the
// previous sample of the same object. The first sample of an object has
// no rate: the field is then left unset, which the kubelet understands.
type cpuRates struct {
	mu   sync.Mutex
	last map[string]*cpuSample
}

type cpuSample struct {
	usage uint64
	at    time.Time
	rate  *uint64
	asked time.Time
}

func newCPURates() *cpuRates { return &cpuRates{last: map[string]*cpuSample{}} }

func (r *cpuRates) rate(key string, usage uint64, at time.Time) *uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, ok := r.last[key]
	if !ok || usage < prev.usage || at.Before(prev.at) {
		// New, or a counter that went back (a recreated cgroup).
		r.last[key] = &cpuSample{usage: usage, at: at, asked: at}
		return nil
	}
	prev.asked = at
	dt := at.Sub(prev.at)
	if dt < minWindow {
		return prev.rate
	}
	v := uint64(float64(usage-prev.usage) / dt.Seconds())
	prev.usage, prev.at, prev.rate = usage, at, &v
	return &v
}

// prune forgets objects not asked about recently.
func (r *cpuRates) prune(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.last {
		if now.Sub(s.asked) > forgetAfter {
			delete(r.last, k)
		}
	}
}
