package stats_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestPressureAndSwapInStats: on cgroup v2, ContainerStats carries the
// container's pressure stall information for CPU, memory and I/O (the
// kubelet's Summary API and its PSI specs read them), the CPU stall of a
// throttled busy loop growing, and the swap a container beyond its memory
// limit uses, with what its swap limit leaves.
func TestPressureAndSwapInStats(t *testing.T) {
	if !framework.CgroupV2() {
		t.Skip("PSI and per-cgroup swap are cgroup v2's (run it in the v2 VM: hack/vm-v2)")
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu.pressure"); err != nil {
		t.Skipf("no PSI on this kernel: %v", err)
	}
	swapTotal := meminfoKB(t, "SwapTotal")
	e := newEnv(t)
	pod, podCfg := e.RunPod("pressure")
	// A busy loop held to a tenth of a CPU is stalled most of the time.
	burner := e.Run(pod, podCfg, "burner", "while :; do :; done", func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 10000}}
	})
	var cpu *runtimeapi.PsiStats
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		st := e.containerStats(burner)
		cpu = st.GetCpu().GetPsi()
		if cpu.GetSome().GetTotal() > 0 {
			if st.GetMemory().GetPsi() == nil || st.GetIo().GetPsi() == nil {
				t.Errorf("memory PSI %v, io PSI %v: want both", st.GetMemory().GetPsi(), st.GetIo().GetPsi())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the throttled loop's CPU pressure after 30s: %v, want a some total above 0", cpu)
		}
	}
	t.Logf("cpu pressure: some total %d µs, avg10 %.2f", cpu.GetSome().GetTotal(), cpu.GetSome().GetAvg10())

	if swapTotal < 128<<10 {
		t.Logf("swap: %d kB on this machine, not enough to check swap usage", swapTotal)
		return
	}
	// awk holds a 60 MB string in 32 MiB of memory: the rest is swapped,
	// up to the 64 MiB the unified map allows.
	const limit, swapLimit = 32 << 20, 64 << 20
	hog := e.Run(pod, podCfg, "hog", `exec awk 'BEGIN { s = sprintf("%60000000s", ""); print "allocated"; system("sleep 100000") }'`, func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			MemoryLimitInBytes: limit, Unified: map[string]string{"memory.swap.max": "67108864"},
		}}
	})
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		sw := e.containerStats(hog).GetSwap()
		used := sw.GetSwapUsageBytes().GetValue()
		if used > 16<<20 {
			if avail := sw.GetSwapAvailableBytes(); avail == nil || avail.Value != swapLimit-used {
				t.Errorf("swap available %v with %d used of %d: want the difference", avail, used, swapLimit)
			}
			t.Logf("swap: %d bytes used, %d available", used, sw.GetSwapAvailableBytes().GetValue())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 MB held in a 32 MiB limit: swap %v after 90s, want over 16 MiB used", sw)
		}
	}
}

// meminfoKB is a /proc/meminfo field, in kB.
func meminfoKB(t *testing.T, field string) uint64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/meminfo", field)
	return 0
}
