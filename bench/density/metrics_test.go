package density

import (
	"math"
	"strings"
	"testing"
)

const scrape = `# HELP kubelet_pleg_relist_duration_seconds [ALPHA] Duration in seconds for relisting pods in PLEG.
# TYPE kubelet_pleg_relist_duration_seconds histogram
kubelet_pleg_relist_duration_seconds_bucket{le="0.005"} 10
kubelet_pleg_relist_duration_seconds_bucket{le="0.01"} 30
kubelet_pleg_relist_duration_seconds_bucket{le="0.025"} 90
kubelet_pleg_relist_duration_seconds_bucket{le="0.05"} 100
kubelet_pleg_relist_duration_seconds_bucket{le="+Inf"} 100
kubelet_pleg_relist_duration_seconds_sum 1.5
kubelet_pleg_relist_duration_seconds_count 100
kubelet_running_pods 250
kubelet_running_containers{container_state="running"} 250
kubelet_running_containers{container_state="exited"} 3 1700000000000
weird{a="x,y}",b="q\"uote"} 7
process_resident_memory_bytes 5.0e+07
kubelet_http_requests_total_sum 4
kubelet_runtime_operations_duration_seconds_bucket{operation_type="container_status",le="0.01"} 40
kubelet_runtime_operations_duration_seconds_bucket{operation_type="container_status",le="+Inf"} 50
kubelet_runtime_operations_duration_seconds_sum{operation_type="container_status"} 0.9
kubelet_runtime_operations_duration_seconds_count{operation_type="container_status"} 50
kubelet_runtime_operations_duration_seconds_bucket{le="0.01",operation_type="list_containers"} 5
kubelet_runtime_operations_duration_seconds_bucket{le="+Inf",operation_type="list_containers"} 6
kubelet_runtime_operations_duration_seconds_sum{operation_type="list_containers"} 0.1
kubelet_runtime_operations_duration_seconds_count{operation_type="list_containers"} 6
`

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	h := m.hists["kubelet_pleg_relist_duration_seconds"]
	if h == nil || len(h.buckets) != 5 || h.count != 100 || h.sum != 1.5 {
		t.Fatalf("pleg histogram: %+v", h)
	}
	if !math.IsInf(h.buckets[4].le, 1) {
		t.Errorf("last bucket %v, want +Inf", h.buckets[4].le)
	}
	for key, want := range map[string]float64{
		"kubelet_running_pods":                                  250,
		`kubelet_running_containers{container_state="running"}`: 250,
		`kubelet_running_containers{container_state="exited"}`:  3,
		`weird{a="x,y}",b="q\"uote"}`:                           7,
		"process_resident_memory_bytes":                         5e7,
		"kubelet_http_requests_total_sum":                       4, // no histogram of that name: a sample
	} {
		if got, ok := m.samples[key]; !ok || got != want {
			t.Errorf("sample %s = %v (present %v), want %v", key, got, ok, want)
		}
	}
}

func TestParseMetricsSeries(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	all := m.hists["kubelet_runtime_operations_duration_seconds"]
	if all == nil || all.count != 56 || all.buckets[0].count != 45 || all.buckets[1].count != 56 {
		t.Fatalf("histogram summed over operation types: %+v", all)
	}
	cs := m.series[`kubelet_runtime_operations_duration_seconds{operation_type="container_status"}`]
	if cs == nil || cs.count != 50 || cs.sum != 0.9 || len(cs.buckets) != 2 || cs.buckets[0].count != 40 {
		t.Fatalf("container_status series: %+v", cs)
	}
	// le before or after the other labels: the same series.
	lc := m.series[`kubelet_runtime_operations_duration_seconds{operation_type="list_containers"}`]
	if lc == nil || lc.count != 6 || lc.buckets[1].count != 6 {
		t.Fatalf("list_containers series: %+v", lc)
	}
	if m.series["kubelet_pleg_relist_duration_seconds"] == nil {
		t.Error("an unlabelled histogram has a series of its own name")
	}
}

func TestParseSampleLabels(t *testing.T) {
	name, labels, v, err := parseSample(`x_bucket{le="0.5",op="a\\b"} 3 123`)
	if err != nil || name != "x_bucket" || labels["le"] != "0.5" || labels["op"] != `a\b` || v != 3 {
		t.Fatalf("got %q %v %v %v", name, labels, v, err)
	}
	for _, bad := range []string{`x{le="0.5} 3`, `x{le=0.5} 3`, `x`, `x{} notanumber`} {
		if _, _, _, err := parseSample(bad); err == nil {
			t.Errorf("parseSample(%q): no error", bad)
		}
	}
}

func TestQuantile(t *testing.T) {
	m, _ := parseMetrics(strings.NewReader(scrape))
	h := m.hists["kubelet_pleg_relist_duration_seconds"]
	for _, c := range []struct{ q, want float64 }{
		{0.05, 0.0025}, // in the first bucket, from 0
		{0.5, 0.015},   // rank 50: a third of the way through (0.01, 0.025]
		{0.99, 0.0475}, // rank 99: nine tenths through (0.025, 0.05]
		{1, 0.05},
	} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-4 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	// Observations beyond the last finite bound: that bound, as Prometheus.
	inf := &histogram{buckets: []bucket{{1, 1}, {math.Inf(1), 10}}}
	if got := inf.quantile(0.99); got != 1 {
		t.Errorf("quantile in +Inf = %v, want 1", got)
	}
	if got := (&histogram{buckets: []bucket{{1, 0}, {math.Inf(1), 0}}}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty histogram: %v, want NaN", got)
	}
}

func TestHistogramSub(t *testing.T) {
	before := &histogram{buckets: []bucket{{0.1, 5}, {1, 8}, {math.Inf(1), 8}}, count: 8, sum: 2}
	after := &histogram{buckets: []bucket{{0.1, 5}, {1, 18}, {math.Inf(1), 20}}, count: 20, sum: 12}
	d := after.sub(before)
	if d.count != 12 || d.sum != 10 || d.buckets[0].count != 0 || d.buckets[1].count != 10 || d.buckets[2].count != 12 {
		t.Fatalf("delta %+v", d)
	}
	// Every new observation in (0.1, 1]: the median is inside that bucket.
	if q := d.quantile(0.5); q <= 0.1 || q > 1 {
		t.Errorf("median of the delta %v", q)
	}
	if after.buckets[1].count != 18 {
		t.Error("sub changed its receiver")
	}
}
