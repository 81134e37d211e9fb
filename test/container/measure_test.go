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
// 20) and the monitors' memory (docs/containers.md): with a pod that has
// no container yet, with 1 and 10 pods of one container each, and with
// the 10 pods after 50 execs each (what exec probes do to a monitor).
// Each memory figure is taken once the monitors have been quiet for
// 1.5 s.
//
//	hack/registry -- go test ./test/container -run TestMeasure -v
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

	quiet := func() { time.Sleep(1500 * time.Millisecond) }
	var ctrs []string
	for i := 0; i < 10; i++ {
		pc := e.podConfig(fmt.Sprintf("mem%d", i))
		p := e.runPod(pc)
		if i == 0 {
			quiet()
			logMemory(t, e.d.State, "1 pod, no container")
		}
		ctrs = append(ctrs, e.run(p, pc, e.ctrConfig("sleep", "sleep 1000")))
		if i == 0 || i == 9 {
			quiet()
			logMemory(t, e.d.State, fmt.Sprintf("%d pods, 1 container each", i+1))
		}
	}
	for _, id := range ctrs {
		for j := 0; j < 50; j++ {
			e.exec(id, 10, "true")
		}
	}
	quiet()
	logMemory(t, e.d.State, "10 pods after 50 execs each")
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// logMemory logs the memory of the berth-monitor processes serving
// sockets under state: RSS and PSS, PSS split into private (anonymous)
// and file-backed (the binary, shared by every monitor), and threads.
func logMemory(t *testing.T, state, label string) {
	t.Helper()
	var rss, pss, anon, file, threads int64
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmd), "berth-monitor") || !strings.Contains(string(cmd), state) {
			continue
		}
		dir := filepath.Dir(p)
		rollup, err := os.ReadFile(filepath.Join(dir, "smaps_rollup"))
		if err != nil {
			continue
		}
		n++
		fields := map[string]*int64{"Rss:": &rss, "Pss:": &pss, "Pss_Anon:": &anon, "Pss_File:": &file}
		status, _ := os.ReadFile(filepath.Join(dir, "status"))
		for _, line := range strings.Split(string(rollup)+string(status), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.ParseInt(f[1], 10, 64)
			if p, ok := fields[f[0]]; ok {
				*p += v
			} else if f[0] == "Threads:" {
				threads += v
			}
		}
	}
	if n == 0 {
		t.Logf("%s: no monitor running", label)
		return
	}
	each := func(v int64) int64 { return v / int64(n) }
	t.Logf("%s: %d monitors; each RSS %d kB, PSS %d kB (private %d kB, file %d kB), %d threads; PSS total %d kB",
		label, n, each(rss), each(pss), each(anon), each(file), threads/int64(n), pss)
}
