package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBerthSteps(t *testing.T) {
	log := `time=2026-11-30T09:33:10.455Z level=INFO msg="pod sandbox ready" component=sandbox pod=aaa name=seq-0_bench_x_0 ips=[10.251.0.3] pid=30304 duration=69.08763ms files=94.111µs netns=600.914µs cni_add=67.544553ms pause=13.171154ms
time=2026-11-30T09:33:10.456Z level=INFO msg="pod sandbox ready" component=sandbox pod=bbb name="other pod" netns=2ms cni_add=3ms pause=4ms
time=2026-11-30T09:33:11.000Z level=INFO msg="pod sandbox stopped" component=sandbox pod=aaa pause=550µs monitor=4.49ms cni_del=37ms
`
	path := filepath.Join(t.TempDir(), "berth.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	steps, err := berthSteps(path, map[string]bool{"aaa": true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"netns": 0.6, "cni_add": 67.544, "pause": 13.171, "pause_stop": 0.55, "monitor_stop": 4.49, "cni_del": 37}
	for k, v := range want {
		if d := steps[k]; d == nil || d.N != 1 || d.P50 < v-0.01 || d.P50 > v+0.01 {
			t.Errorf("%s = %+v, want one sample of %v", k, d, v)
		}
	}
	if len(steps) != len(want) {
		t.Errorf("steps = %v", steps)
	}
}
