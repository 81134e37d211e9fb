package stats_test

import (
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestMeasureListStats times ListContainerStats (and ListPodSandboxStats)
// with 50 running containers: 10 pods of 5. The first call measures every
// writable layer; later ones find them cached. BERTH_STATS_CONTAINERS
// changes the count.
func TestMeasureListStats(t *testing.T) {
	e := newEnv(t)
	n := 50
	if v := os.Getenv("BERTH_STATS_CONTAINERS"); v != "" {
		fmt.Sscan(v, &n)
	}
	perPod := 5
	for i := 0; i < n; i += perPod {
		pod, cfg := e.RunPod(fmt.Sprintf("m%d", i/perPod))
		for j := i; j < i+perPod && j < n; j++ {
			e.Run(pod, cfg, fmt.Sprintf("c%d", j), "sleep 100000", nil)
		}
	}
	ctx := framework.Ctx(t)
	timeIt := func(call func() int) (time.Duration, int) {
		start := time.Now()
		got := call()
		return time.Since(start), got
	}
	listCtrs := func() int {
		resp, err := e.D.Runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Stats)
	}
	listPods := func() int {
		resp, err := e.D.Runtime.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Stats)
	}
	cold, got := timeIt(listCtrs)
	if got != n {
		t.Fatalf("ListContainerStats: %d items, want %d", got, n)
	}
	const calls = 30
	var ctrTimes, podTimes []time.Duration
	for range calls {
		d, _ := timeIt(listCtrs)
		ctrTimes = append(ctrTimes, d)
		d, pods := timeIt(listPods)
		if pods != (n+perPod-1)/perPod {
			t.Fatalf("ListPodSandboxStats: %d pods", pods)
		}
		podTimes = append(podTimes, d)
	}
	q := func(ds []time.Duration, p float64) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[int(p*float64(len(ds)-1))]
	}
	t.Logf("ListContainerStats, %d running containers: first call %s; next %d calls median %s, p90 %s, max %s",
		n, cold.Round(10*time.Microsecond), calls, q(ctrTimes, 0.5).Round(10*time.Microsecond), q(ctrTimes, 0.9).Round(10*time.Microsecond), q(ctrTimes, 1).Round(10*time.Microsecond))
	t.Logf("ListPodSandboxStats, %d pods: median %s, p90 %s", (n+perPod-1)/perPod, q(podTimes, 0.5).Round(10*time.Microsecond), q(podTimes, 0.9).Round(10*time.Microsecond))
	if med := q(ctrTimes, 0.5); med > time.Second {
		t.Fatalf("ListContainerStats median %s: not cheap", med)
	}
}
