package faults_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// loadUsage is what the daemon holds at one instant, as an operator sees it on
// /metrics (fds are counted in /proc as well, which needs no cooperation).
type loadUsage struct {
	Goroutines float64 // go_goroutines
	FDs        float64 // entries of /proc/<pid>/fd
	RSS        float64 // process_resident_memory_bytes
	HeapInuse  float64 // go_memstats_heap_inuse_bytes
	LiveHeap   float64 // go_gc_heap_live_bytes: what the last GC found live
	GCs        float64 // go_gc_duration_seconds_count: completed GC cycles
}

func (u loadUsage) String() string {
	return fmt.Sprintf("goroutines %.0f, fds %.0f, RSS %.1f MiB, heap in use %.1f MiB, live heap %.2f MiB",
		u.Goroutines, u.FDs, u.RSS/(1<<20), u.HeapInuse/(1<<20), u.LiveHeap/(1<<20))
}

func (u loadUsage) max(o loadUsage) loadUsage {
	return loadUsage{
		Goroutines: max(u.Goroutines, o.Goroutines), FDs: max(u.FDs, o.FDs),
		RSS: max(u.RSS, o.RSS), HeapInuse: max(u.HeapInuse, o.HeapInuse), LiveHeap: max(u.LiveHeap, o.LiveHeap),
		GCs: max(u.GCs, o.GCs),
	}
}

// loadScraper reads a daemon's usage. Its HTTP client keeps no connection
// open, so a scrape leaves no fd or goroutine behind in the daemon.
type loadScraper struct {
	addr   string
	pid    int
	client *http.Client
}

func newLoadScraper(addr string, pid int) *loadScraper {
	return &loadScraper{addr: addr, pid: pid, client: &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{DisableKeepAlives: true},
	}}
}

func (s *loadScraper) usage() (loadUsage, error) {
	resp, err := s.client.Get("http://" + s.addr + "/metrics")
	if err != nil {
		return loadUsage{}, fmt.Errorf("scrape %s: %w", s.addr, err)
	}
	defer resp.Body.Close()
	want := map[string]*float64{}
	var u loadUsage
	want["go_goroutines"] = &u.Goroutines
	want["process_resident_memory_bytes"] = &u.RSS
	want["go_memstats_heap_inuse_bytes"] = &u.HeapInuse
	want["go_gc_duration_seconds_count"] = &u.GCs
	want["go_gc_heap_live_bytes"] = &u.LiveHeap
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if p := want[name]; ok && p != nil {
			if *p, err = strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil {
				return loadUsage{}, fmt.Errorf("scrape %s: %s: %w", s.addr, name, err)
			}
			delete(want, name)
		}
	}
	if err := sc.Err(); err != nil {
		return loadUsage{}, fmt.Errorf("scrape %s: %w", s.addr, err)
	}
	for name := range want {
		return loadUsage{}, fmt.Errorf("scrape %s: no %s", s.addr, name)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid))
	if err != nil {
		return loadUsage{}, fmt.Errorf("fds of berth %d: %w", s.pid, err)
	}
	u.FDs = float64(len(fds))
	return u, nil
}

// peak samples usage every interval until stop is closed and returns the
// highest of each figure.
func (s *loadScraper) peak(interval time.Duration, stop <-chan struct{}) func() loadUsage {
	var (
		mu   sync.Mutex
		high loadUsage
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if u, err := s.usage(); err == nil {
				mu.Lock()
				high = high.max(u)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() loadUsage {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return high
	}
}
