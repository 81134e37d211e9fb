package server

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// Metrics are the CRI call metrics. A nil *Metrics records nothing.
type Metrics struct {
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// NewMetrics creates the CRI metrics and registers them with reg, which
// should be private to the daemon: tests run several servers in one
// process.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "berth",
			Name:      "cri_requests_total",
			Help:      "CRI calls handled, by service, method and gRPC code.",
		}, []string{"service", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "berth",
			Name:      "cri_request_duration_seconds",
			Help:      "Time to handle a CRI call, by service and method.",
			// From 100µs (List calls answered from memory) to ~26s (pulls).
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"service", "method"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register CRI metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) observe(service, method string, code codes.Code, elapsed time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(service, method, code.String()).Inc()
	m.latency.WithLabelValues(service, method).Observe(elapsed.Seconds())
}
