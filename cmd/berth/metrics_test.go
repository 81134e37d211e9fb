package main

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsHandlerRuntime checks that /metrics carries what an operator
// (and the load test) watches for leaks besides berth's own series.
func TestMetricsHandlerRuntime(t *testing.T) {
	h, err := metricsHandler(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"go_goroutines", "go_memstats_heap_inuse_bytes", "go_gc_heap_live_bytes", "go_gc_duration_seconds_count",
		"process_open_fds", "process_resident_memory_bytes",
	} {
		if !hasSample(string(body), name) {
			t.Errorf("no %s sample in:\n%s", name, body)
		}
	}
}

func hasSample(text, name string) bool {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, name+" ") {
			return true
		}
	}
	return false
}
