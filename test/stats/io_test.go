package stats_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestIOAndPressureMetrics: a container's direct writes show in its
// per-device I/O metrics (io.stat on v2, blkio on v1) under the block
// device's /dev name, and on v2 its pressure stall totals are metrics too.
//
// v2 only: v1's blkio.throttle counters, which cAdvisor and berth read
// there, counted none of 8 MiB of direct writes on the development
// machine's 6.18 kernel (they follow throttled I/O only); the v1 parser
// is unit-tested (stats.TestReadDetailV1).
func TestIOAndPressureMetrics(t *testing.T) {
	if !framework.CgroupV2() {
		t.Skip("cgroup v1: the kernel's blkio counters do not see unthrottled I/O (run it in the v2 VM: hack/vm-v2)")
	}
	e := newEnv(t)
	var st unix.Stat_t
	if err := unix.Stat(e.D.Root, &st); err != nil {
		t.Fatal(err)
	}
	if unix.Major(st.Dev) == 0 {
		t.Skipf("berth's root %s is on a filesystem with no block device: no I/O to count", e.D.Root)
	}
	pod, podCfg := e.RunPod("io")
	// O_DIRECT: the writes reach the disk as the container's own, not as
	// page cache written back later (charged to no one on v1).
	id := e.Run(pod, podCfg, "writer", "dd if=/dev/zero of=/blob bs=1M count=8 oflag=direct 2>/dev/null && touch /done; sleep 100000", nil)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r, err := e.D.Runtime.ExecSync(framework.Ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"test", "-f", "/done"}, Timeout: 10})
		if err == nil && r.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer did not finish its 8 MiB in 60s")
		}
	}

	metrics := e.containerMetrics(id)
	var written, blkioWritten uint64
	for _, m := range metrics["container_fs_writes_bytes_total"] {
		if !strings.HasPrefix(m.labels["device"], "/dev/") {
			t.Errorf("container_fs_writes_bytes_total device label %q: want a /dev path", m.labels["device"])
		}
		written += m.value
	}
	for _, m := range metrics["container_blkio_device_usage_total"] {
		if m.labels["operation"] == "Write" {
			blkioWritten += m.value
		}
	}
	if written < 8<<20 || blkioWritten < 8<<20 {
		t.Errorf("8 MiB written with O_DIRECT: container_fs_writes_bytes_total %d, container_blkio_device_usage_total{operation=Write} %d", written, blkioWritten)
	}
	if len(metrics["container_fs_writes_total"]) == 0 || len(metrics["container_fs_reads_bytes_total"]) == 0 {
		t.Errorf("no container_fs_writes_total or container_fs_reads_bytes_total: %v", metrics)
	}
	t.Logf("writes: %d bytes over %d devices", written, len(metrics["container_fs_writes_bytes_total"]))

	if _, err := os.Stat("/sys/fs/cgroup/cpu.pressure"); err != nil {
		t.Logf("no PSI on this kernel (%v): pressure metrics not checked", err)
		return
	}
	for _, res := range []string{"cpu", "memory", "io"} {
		if len(metrics["container_pressure_"+res+"_waiting_seconds_total"]) != 1 {
			t.Errorf("container_pressure_%s_waiting_seconds_total: %v, want one", res, metrics["container_pressure_"+res+"_waiting_seconds_total"])
		}
	}
}

type metricValue struct {
	labels map[string]string
	value  uint64
}

// containerMetrics is ListPodSandboxMetrics' metrics of one container, by
// name, with their labels keyed as the descriptors say.
func (e *env) containerMetrics(id string) map[string][]metricValue {
	e.T.Helper()
	descs, err := e.D.Runtime.ListMetricDescriptors(framework.Ctx(e.T), &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		e.T.Fatal(err)
	}
	keys := map[string][]string{}
	for _, d := range descs.Descriptors {
		keys[d.Name] = d.LabelKeys
	}
	resp, err := e.D.Runtime.ListPodSandboxMetrics(framework.Ctx(e.T), &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		e.T.Fatal(err)
	}
	out := map[string][]metricValue{}
	for _, pm := range resp.PodMetrics {
		for _, cm := range pm.ContainerMetrics {
			if cm.ContainerId != id {
				continue
			}
			for _, m := range cm.Metrics {
				labels := map[string]string{}
				for i, k := range keys[m.Name] {
					if i < len(m.LabelValues) {
						labels[k] = m.LabelValues[i]
					}
				}
				out[m.Name] = append(out[m.Name], metricValue{labels: labels, value: m.Value.GetValue()})
			}
		}
	}
	return out
}
