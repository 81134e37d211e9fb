package main

import "testing"

func TestMergeSteps(t *testing.T) {
	pre := &Steps{Label: "a", Iterations: 2, Steps: []Step{{Name: "x", Phase: "start", InSum: true, Samples: []float64{1, 2}}}}
	post := &Steps{Label: "a", Iterations: 3, Steps: []Step{{Name: "x", Phase: "start", InSum: true, Samples: []float64{10, 20, 30}}}}
	other := &Steps{Label: "b", Iterations: 1, Steps: []Step{{Name: "x", Samples: []float64{5}}}}
	got := mergeSteps([]*Steps{pre, other, post})
	if len(got) != 2 || got[0].Label != "a" || got[1].Label != "b" {
		t.Fatalf("merged labels: %+v", got)
	}
	a := got[0]
	if a.Iterations != 5 || len(a.Steps) != 1 || len(a.Steps[0].Samples) != 5 || a.Steps[0].P50 != 10 || a.Steps[0].P90 != 30 || !a.Steps[0].InSum {
		t.Errorf("merged a = %+v", a)
	}
}
