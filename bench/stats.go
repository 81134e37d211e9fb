package main

import (
	"slices"
	"time"

	"github.com/berth-runtime/berth/bench/report"
)

// Dist summarises samples of one figure (milliseconds, megabytes or
// seconds: the row says which).
type Dist struct {
	N       int       `json:"n"`
	P50     float64   `json:"p50"`
	P90     float64   `json:"p90"`
	P99     float64   `json:"p99"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Mean    float64   `json:"mean"`
	Samples []float64 `json:"samples"`
}

// newDist sorts a copy of the samples. Percentiles are nearest-rank: with
// 20 samples p99 is the largest one.
func newDist(samples []float64) Dist {
	if len(samples) == 0 {
		return Dist{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Dist{
		N: len(s), P50: report.Rank(s, 0.50), P90: report.Rank(s, 0.90), P99: report.Rank(s, 0.99),
		Min: s[0], Max: s[len(s)-1], Mean: sum / float64(len(s)),
		Samples: samples,
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// median of unsorted values; 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return newDist(v).P50
}
