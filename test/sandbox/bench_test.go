package sandbox_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// BenchmarkPodSandboxLatency measures, through the CRI socket on the real
// bridge network, the median RunPodSandbox and StopPodSandbox +
// RemovePodSandbox latency over 20 pods (docs/sandbox.md):
//
//	go test ./test/sandbox -run '^$' -bench PodSandboxLatency -benchtime 1x
func BenchmarkPodSandboxLatency(b *testing.B) {
	framework.RequireRoot(b)
	const pods = 20
	n := cnitest.NewNet(b)
	parent := "/berth-bench-" + framework.RandHex(4)
	b.Cleanup(func() { framework.RemoveCgroup(parent) })
	d := framework.StartDaemon(b, framework.WithArgs("--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.BinDir, "--log-level", "info"))
	ctx := context.Background()
	var run, teardown []time.Duration
	for i := 0; i < b.N; i++ {
		ids := make([]string, 0, pods)
		for p := range pods {
			cfg := &runtimeapi.PodSandboxConfig{
				Metadata: &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("bench-%d", p), Namespace: "bench", Uid: framework.RandHex(8)},
				Hostname: fmt.Sprintf("bench-%d", p),
				Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
			}
			start := time.Now()
			resp, err := d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if err != nil {
				b.Fatal(err)
			}
			run = append(run, time.Since(start))
			ids = append(ids, resp.PodSandboxId)
		}
		for _, id := range ids {
			start := time.Now()
			if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				b.Fatal(err)
			}
			if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				b.Fatal(err)
			}
			teardown = append(teardown, time.Since(start))
		}
	}
	b.ReportMetric(ms(median(run)), "run-ms/median")
	b.ReportMetric(ms(median(teardown)), "stop+remove-ms/median")
	b.ReportMetric(ms(slices.Max(run)), "run-ms/max")
	b.ReportMetric(ms(slices.Max(teardown)), "stop+remove-ms/max")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
