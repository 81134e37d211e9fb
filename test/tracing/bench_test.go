package tracing_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
	"github.com/berth-runtime/berth/test/otlp"
)

// beforeTracing is the last commit without tracing (its go.mod commit's
// parent); $BERTH_BENCH_BEFORE names another.
const beforeTracing = "dd0b4cf^"

// BenchmarkPodStartTracing times pod start (RunPodSandbox +
// CreateContainer + StartContainer of busybox, image present) and its
// teardown on three daemons side by side, sample by sample in turn: the
// commit before tracing, this berth with tracing off, and this berth
// tracing every call (sampling a million per million, no caller context)
// to a receiver in the test process (docs/tracing.md):
//
//	go test ./test/tracing -run '^$' -bench PodStartTracing -benchtime 1x
func BenchmarkPodStartTracing(b *testing.B) {
	framework.RequireRoot(b)
	reg := framework.TestRegistry(b)
	before := cmpOr(os.Getenv("BERTH_BENCH_BEFORE"), beforeTracing)
	pods := 20
	if s := os.Getenv("BERTH_BENCH_PODS"); s != "" {
		fmt.Sscan(s, &pods)
	}
	r := otlp.Start(b)
	n := cnitest.NewNet(b)
	parent := "/berth-tbench-" + framework.RandHex(4)
	b.Cleanup(func() { framework.RemoveCgroup(parent) })
	args := framework.WithArgs("--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.BinDir, "--log-level", "info")
	type daemon struct {
		name            string
		d               *framework.Daemon
		start, teardown []time.Duration
	}
	daemons := []*daemon{
		{name: "before", d: framework.StartDaemon(b, args, framework.WithBinary(framework.BuildCommit(b, before)))},
		{name: "off", d: framework.StartDaemon(b, args)},
		{name: "on", d: framework.StartDaemon(b, args, framework.WithConfig(fmt.Sprintf(
			"[tracing]\nenable = true\nendpoint = %q\nsampling_rate_per_million = 1000000\n", r.Addr)))},
	}
	image := reg + "/library/busybox:latest"
	ctx := context.Background()
	for _, d := range daemons {
		if _, err := d.d.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
			b.Fatal(err)
		}
	}
	podStart := func(d *daemon, i int) {
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("bench-%d", i), Namespace: "bench", Uid: framework.RandHex(8)},
			Hostname: "bench", LogDirectory: b.TempDir(),
			Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
		}
		t0 := time.Now()
		resp, err := d.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		c, err := d.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, SandboxConfig: cfg, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"}, Image: &runtimeapi.ImageSpec{Image: image},
			Command: []string{"sleep", "3600"}, LogPath: "sleep.log",
		}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := d.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.ContainerId}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
			b.Fatal(err)
		}
		if i >= 0 {
			d.start = append(d.start, t1.Sub(t0))
			d.teardown = append(d.teardown, time.Since(t1))
		}
	}
	for _, d := range daemons {
		podStart(d, -1) // warm-up, untimed
	}
	for range b.N {
		for i := range pods {
			// The order rotates, so that none is always first after a pause.
			for k := range daemons {
				podStart(daemons[(i+k)%len(daemons)], i)
			}
		}
	}
	for _, d := range daemons {
		b.ReportMetric(ms(median(d.start)), d.name+"-start-ms/p50")
		b.ReportMetric(ms(percentile(d.start, 90)), d.name+"-start-ms/p90")
		b.ReportMetric(ms(median(d.teardown)), d.name+"-teardown-ms/p50")
	}
	if len(r.Spans()) == 0 {
		b.Errorf("the tracing daemon exported no spans")
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func median(ds []time.Duration) time.Duration { return percentile(ds, 50) }

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
