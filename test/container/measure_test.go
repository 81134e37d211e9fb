package container_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestMeasure reports CreateContainer/StartContainer latency (median of
// 20) and the monitors' memory with 1 and 10 pods (docs/containers.md).
func TestMeasure(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("measure")
	pod := e.runPod(podCfg)
	ctx := framework.Ctx(t)
	var creates, starts []time.Duration
	for i := 0; i < 20; i++ {
		cfg := e.ctrConfig(fmt.Sprintf("c%d", i), "sleep 1000")
		t0 := time.Now()
		resp, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		e.start(resp.ContainerId)
		creates, starts = append(creates, t1.Sub(t0)), append(starts, time.Since(t1))
	}
	t.Logf("CreateContainer median %s, StartContainer median %s (20 containers)", median(creates), median(starts))
	e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})

	var pods []string
	for i := 0; i < 10; i++ {
		pc := e.podConfig(fmt.Sprintf("mem%d", i))
		p := e.runPod(pc)
		e.run(p, pc, e.ctrConfig("sleep", "sleep 1000"))
		pods = append(pods, p)
		if i == 0 || i == 9 {
			time.Sleep(300 * time.Millisecond)
			rss, pss, n := monitorMemory(t, e.d.State)
			t.Logf("%d pods: %d monitors, RSS %d kB total (%d kB each), PSS %d kB total (%d kB each)", i+1, n, rss, rss/int64(n), pss, pss/int64(n))
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// monitorMemory sums Rss and Pss (kB) of the berth-monitor processes
// serving sockets under state.
func monitorMemory(t *testing.T, state string) (rss, pss int64, n int) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmd), "berth-monitor") || !strings.Contains(string(cmd), state) {
			continue
		}
		rollup, err := os.ReadFile(filepath.Join(filepath.Dir(p), "smaps_rollup"))
		if err != nil {
			continue
		}
		n++
		for _, line := range strings.Split(string(rollup), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "Rss:":
				rss += v
			case "Pss:":
				pss += v
			}
		}
	}
	if n == 0 {
		t.Fatal("no monitor process found")
	}
	return rss, pss, n
}
