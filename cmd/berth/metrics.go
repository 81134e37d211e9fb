package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveMetrics serves reg, plus Go runtime and process metrics, at
// http://addr/metrics. Binding happens before it returns, so a bad or busy
// address fails start-up instead of being logged later.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (*http.Server, error) {
	handler, err := metricsHandler(reg)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "address", addr, "error", err)
		}
	}()
	log.Info("serving metrics", "address", lis.Addr().String())
	return srv, nil
}

// metricsHandler adds the Go runtime's and the process's collectors to reg
// (goroutines, heap, open fds, resident memory: what an operator watches
// for leaks) and returns the handler that serves them.
func metricsHandler(reg *prometheus.Registry) (http.Handler, error) {
	// The heap the last GC found live (go_gc_heap_live_bytes), on top of
	// the defaults: unlike the heap in use it holds no garbage waiting to
	// be collected, so it is the figure that shows a leak (test/faults'
	// load test compares it).
	liveHeap := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}
	if err := reg.Register(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(liveHeap))); err != nil {
		return nil, fmt.Errorf("register Go metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("register process metrics: %w", err)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
