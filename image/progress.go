package image

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The CRI has no progress API: a pull is watched through the log, the
// metrics and the admin API's list of pulls in flight (Pulls).
const (
	progressFirst = 800 * time.Millisecond // after the first byte: a line within 1 s of it
	progressEvery = 5 * time.Second        // after that
)

// Metrics are the image service's Prometheus metrics. A nil *Metrics
// records nothing.
type Metrics struct {
	bytes    prometheus.Counter
	inFlight prometheus.Gauge
	duration *prometheus.HistogramVec
}

// NewMetrics creates the pull metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "berth", Subsystem: "image",
			Name: "pull_bytes_total",
			Help: "Layer bytes received from registries, every byte a dropped connection made fetch again included.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "berth", Subsystem: "image",
			Name: "pulls_in_flight",
			Help: "Pulls running (concurrent pulls of one image count once).",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "berth", Subsystem: "image",
			Name: "pull_duration_seconds",
			Help: "Time of a pull, by outcome (success, failure, cancelled).",
			// 50 ms (all layers present) to ~14 min.
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 15),
		}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{m.bytes, m.inFlight, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register image metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) addBytes(n int64) {
	if m != nil && n > 0 {
		m.bytes.Add(float64(n))
	}
}

// PullStatus is the progress of one pull in flight.
type PullStatus struct {
	Ref         string    `json:"ref"`
	Started     time.Time `json:"started"`
	LayersDone  int       `json:"layersDone"`
	LayersTotal int       `json:"layersTotal"`
	// Compressed bytes of the image's layers; those already stored
	// before the pull count as done.
	BytesDone  int64 `json:"bytesDone"`
	BytesTotal int64 `json:"bytesTotal"`
	// BytesPerSecond since the first byte arrived.
	BytesPerSecond float64 `json:"bytesPerSecond"`
}

// layerProgress counts the bytes of one layer download that have gone
// through its digest: what a resumed download need not fetch again.
type layerProgress struct {
	done atomic.Int64
}

// pullTracker follows one run of Pull.
type pullTracker struct {
	ref     string
	started time.Time

	mu        sync.Mutex
	layers    []layerRef
	firstByte time.Time
	// bytesAtFirst is what was already stored when the first byte came,
	// left out of the rate.
	bytesAtFirst int64
	first        chan struct{} // closed at the first byte
}

type pullSet struct {
	mu     sync.Mutex
	pulls  map[*pullTracker]bool
	layers map[string]*layerProgress // by chain ID, while downloading
}

func (s *Service) trackPull(ref string) *pullTracker {
	t := &pullTracker{ref: ref, started: time.Now(), first: make(chan struct{})}
	s.progress.mu.Lock()
	if s.progress.pulls == nil {
		s.progress.pulls = map[*pullTracker]bool{}
	}
	s.progress.pulls[t] = true
	s.progress.mu.Unlock()
	if s.metrics != nil {
		s.metrics.inFlight.Inc()
	}
	return t
}

// endPull forgets t and records its duration by outcome.
func (s *Service) endPull(ctx context.Context, t *pullTracker, err error) {
	s.progress.mu.Lock()
	delete(s.progress.pulls, t)
	s.progress.mu.Unlock()
	s.pullEnded()
	if s.metrics == nil {
		return
	}
	s.metrics.inFlight.Dec()
	outcome := "success"
	switch {
	case err != nil && ctx.Err() != nil:
		outcome = "cancelled"
	case err != nil:
		outcome = "failure"
	}
	s.metrics.duration.WithLabelValues(outcome).Observe(time.Since(t.started).Seconds())
}

// pullsInFlight counts the runs of Pull under way.
func (s *Service) pullsInFlight() int {
	s.progress.mu.Lock()
	defer s.progress.mu.Unlock()
	return len(s.progress.pulls)
}

// layerCounter is the progress of a download of chain, shared by every
// pull waiting for it; done forgets it.
func (s *Service) layerCounter(chain string) (p *layerProgress, done func()) {
	s.progress.mu.Lock()
	defer s.progress.mu.Unlock()
	if s.progress.layers == nil {
		s.progress.layers = map[string]*layerProgress{}
	}
	p = &layerProgress{}
	s.progress.layers[chain] = p
	return p, func() {
		s.progress.mu.Lock()
		if s.progress.layers[chain] == p {
			delete(s.progress.layers, chain)
		}
		s.progress.mu.Unlock()
	}
}

// firstByte tells every pull waiting for chain that data is coming.
func (s *Service) firstByte(chain string) {
	s.progress.mu.Lock()
	pulls := make([]*pullTracker, 0, len(s.progress.pulls))
	for t := range s.progress.pulls {
		pulls = append(pulls, t)
	}
	s.progress.mu.Unlock()
	for _, t := range pulls {
		t.mu.Lock()
		wants := slices.ContainsFunc(t.layers, func(l layerRef) bool { return l.ChainID == chain })
		t.mu.Unlock()
		if wants {
			t.markFirstByte(s)
		}
	}
}

func (t *pullTracker) markFirstByte(s *Service) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.firstByte.IsZero() {
		return
	}
	t.firstByte = time.Now()
	t.bytesAtFirst = s.bytesDoneLocked(t)
	close(t.first)
}

// setLayers tells t what the image is made of, once it is resolved. A
// layer another pull is already downloading has had its first byte.
func (s *Service) setLayers(t *pullTracker, layers []layerRef) {
	t.mu.Lock()
	t.layers = layers
	t.mu.Unlock()
	s.progress.mu.Lock()
	started := false
	for _, l := range layers {
		if p := s.progress.layers[l.ChainID]; p != nil && p.done.Load() > 0 {
			started = true
		}
	}
	s.progress.mu.Unlock()
	if started {
		t.markFirstByte(s)
	}
}

// bytesDoneLocked sums t's layers: stored ones whole, downloading ones
// as far as they have come. t.mu is held.
func (s *Service) bytesDoneLocked(t *pullTracker) int64 {
	var n int64
	for _, l := range t.layers {
		if s.hasLayer(l.ChainID) {
			n += l.Size
			continue
		}
		s.progress.mu.Lock()
		p := s.progress.layers[l.ChainID]
		s.progress.mu.Unlock()
		if p != nil {
			n += p.done.Load()
		}
	}
	return n
}

func (s *Service) status(t *pullTracker) PullStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := PullStatus{Ref: t.ref, Started: t.started, LayersTotal: len(t.layers)}
	for _, l := range t.layers {
		st.BytesTotal += l.Size
		if s.hasLayer(l.ChainID) {
			st.LayersDone++
		}
	}
	st.BytesDone = s.bytesDoneLocked(t)
	if !t.firstByte.IsZero() {
		if secs := time.Since(t.firstByte).Seconds(); secs > 0 {
			st.BytesPerSecond = float64(st.BytesDone-t.bytesAtFirst) / secs
		}
	}
	return st
}

// Pulls lists the pulls in flight, oldest first.
func (s *Service) Pulls() []PullStatus {
	s.progress.mu.Lock()
	pulls := make([]*pullTracker, 0, len(s.progress.pulls))
	for t := range s.progress.pulls {
		pulls = append(pulls, t)
	}
	s.progress.mu.Unlock()
	out := make([]PullStatus, 0, len(pulls))
	for _, t := range pulls {
		out = append(out, s.status(t))
	}
	slices.SortFunc(out, func(a, b PullStatus) int { return a.Started.Compare(b.Started) })
	return out
}

// logProgress logs t's progress progressFirst after its first byte, then
// every progressEvery, until stop is closed.
func (s *Service) logProgress(t *pullTracker, stop <-chan struct{}) {
	select {
	case <-t.first:
	case <-stop:
		return
	}
	timer := time.NewTimer(progressFirst)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-stop:
			return
		}
		st := s.status(t)
		s.log.Info("pulling image", "ref", st.Ref,
			"bytes", st.BytesDone, "total", st.BytesTotal,
			"rate", fmt.Sprintf("%.1fMB/s", st.BytesPerSecond/1e6),
			"layers", fmt.Sprintf("%d/%d", st.LayersDone, st.LayersTotal),
			"elapsed", time.Since(t.started).Round(100*time.Millisecond))
		timer.Reset(progressEvery)
	}
}
