package stats

import (
	"context"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The metrics of ListPodSandboxMetrics carry cAdvisor's names and labels,
// so that the kubelet's /metrics/cadvisor endpoint looks the same when it
// gets them from the runtime. Label keys are sorted, as the CRI asks.
// Values are uint64 in the CRI: CPU seconds are whole seconds.

func ctrLabels() []string { return []string{"container", "id", "image", "name", "namespace", "pod"} }
func netLabels() []string {
	return []string{"container", "id", "image", "interface", "name", "namespace", "pod"}
}
func fsLabels() []string {
	return []string{"container", "device", "id", "image", "name", "namespace", "pod"}
}

type metricDef struct {
	name, help string
	labels     func() []string
	kind       runtimeapi.MetricType
}

func memFailureLabels() []string {
	return []string{"container", "failure_type", "id", "image", "name", "namespace", "pod", "scope"}
}
func blkioLabels() []string {
	return []string{"container", "device", "id", "image", "major", "minor", "name", "namespace", "operation", "pod"}
}

func metricDefs() []metricDef {
	counter, gauge := runtimeapi.MetricType_COUNTER, runtimeapi.MetricType_GAUGE
	return []metricDef{
		{"container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", ctrLabels, counter},
		{"container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", ctrLabels, counter},
		{"container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", ctrLabels, counter},
		{"container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", ctrLabels, counter},
		{"container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", ctrLabels, counter},
		{"container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", ctrLabels, counter},
		{"container_spec_cpu_period", "CPU period of the container.", ctrLabels, gauge},
		{"container_spec_cpu_quota", "CPU quota of the container.", ctrLabels, gauge},
		{"container_spec_cpu_shares", "CPU share of the container.", ctrLabels, gauge},
		{"container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed.", ctrLabels, gauge},
		{"container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes.", ctrLabels, gauge},
		{"container_memory_working_set_bytes", "Current working set in bytes.", ctrLabels, gauge},
		{"container_memory_rss", "Size of RSS in bytes.", ctrLabels, gauge},
		{"container_memory_cache", "Number of bytes of page cache memory.", ctrLabels, gauge},
		{"container_memory_mapped_file", "Size of memory mapped files in bytes.", ctrLabels, gauge},
		{"container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", ctrLabels, gauge},
		{"container_memory_swap", "Container swap usage in bytes.", ctrLabels, gauge},
		{"container_memory_failcnt", "Number of memory usage hits limits.", ctrLabels, counter},
		{"container_memory_failures_total", "Cumulative count of memory allocation failures.", memFailureLabels, counter},
		{"container_oom_events_total", "Count of out of memory events observed for the container.", ctrLabels, counter},
		{"container_spec_memory_limit_bytes", "Memory limit for the container.", ctrLabels, gauge},
		{"container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", ctrLabels, gauge},
		{"container_processes", "Number of processes running inside the container.", ctrLabels, gauge},
		{"container_threads", "Number of threads running inside the container.", ctrLabels, gauge},
		{"container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero.", ctrLabels, gauge},
		{"container_file_descriptors", "Number of open file descriptors for the container.", ctrLabels, gauge},
		{"container_sockets", "Number of open sockets for the container.", ctrLabels, gauge},
		{"container_start_time_seconds", "Start time of the container since unix epoch in seconds.", ctrLabels, gauge},
		{"container_last_seen", "Last time a container was seen by the exporter.", ctrLabels, gauge},
		{"container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", fsLabels, gauge},
		{"container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", fsLabels, gauge},
		{"container_fs_inodes_total", "Number of available Inodes.", fsLabels, gauge},
		{"container_fs_inodes_free", "Number of available Inodes.", fsLabels, gauge},
		// Per block device, from io.stat (v2) or blkio (v1).
		{"container_fs_reads_bytes_total", "Cumulative count of bytes read.", fsLabels, counter},
		{"container_fs_reads_total", "Cumulative count of reads completed.", fsLabels, counter},
		{"container_fs_writes_bytes_total", "Cumulative count of bytes written.", fsLabels, counter},
		{"container_fs_writes_total", "Cumulative count of writes completed.", fsLabels, counter},
		{"container_blkio_device_usage_total", "Blkio device bytes usage.", blkioLabels, counter},
		// PSI, v2 only: cAdvisor's names, "waiting" the some line's total
		// and "stalled" the full line's.
		{"container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.", ctrLabels, counter},
		{"container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.", ctrLabels, counter},
		{"container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.", ctrLabels, counter},
		{"container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.", ctrLabels, counter},
		{"container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to I/O congestion.", ctrLabels, counter},
		{"container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to I/O congestion.", ctrLabels, counter},
		{"container_network_receive_bytes_total", "Cumulative count of bytes received.", netLabels, counter},
		{"container_network_receive_packets_total", "Cumulative count of packets received.", netLabels, counter},
		{"container_network_receive_errors_total", "Cumulative count of errors encountered while receiving.", netLabels, counter},
		{"container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving.", netLabels, counter},
		{"container_network_transmit_bytes_total", "Cumulative count of bytes transmitted.", netLabels, counter},
		{"container_network_transmit_packets_total", "Cumulative count of packets transmitted.", netLabels, counter},
		{"container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting.", netLabels, counter},
		{"container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting.", netLabels, counter},
	}
}

// MetricDescriptors is ListMetricDescriptors: the same list for the life
// of the process, as the kubelet reads it once.
func (c *Collector) MetricDescriptors() []*runtimeapi.MetricDescriptor {
	defs := metricDefs()
	out := make([]*runtimeapi.MetricDescriptor, len(defs))
	for i, d := range defs {
		out[i] = &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: d.labels()}
	}
	return out
}

// PodSandboxMetrics is ListPodSandboxMetrics: every ready pod's network
// metrics and its running containers' metrics.
func (c *Collector) PodSandboxMetrics(ctx context.Context) []*runtimeapi.PodSandboxMetrics {
	now := time.Now()
	ctrs := byPod(c.opts.Containers.StatsContainers())
	kinds := map[string]runtimeapi.MetricType{}
	for _, d := range metricDefs() {
		kinds[d.name] = d.kind
	}
	metric := func(name string, v uint64, ts int64, labels ...string) *runtimeapi.Metric {
		return &runtimeapi.Metric{Name: name, Timestamp: ts, MetricType: kinds[name], LabelValues: labels, Value: &runtimeapi.UInt64Value{Value: v}}
	}
	var ready []Pod
	for _, p := range c.opts.Pods.StatsPods() {
		if p.Ready {
			ready = append(ready, p)
		}
	}
	out := make([]*runtimeapi.PodSandboxMetrics, len(ready))
	parallel(len(ready), func(i int) {
		p := ready[i]
		ns, pod := p.Metadata.GetNamespace(), p.Metadata.GetName()
		pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: p.ID}
		if p.NetNS != "" {
			if ifaces, err := readNetDev(p.NetNS); err == nil {
				id := p.Cgroup
				if id == "" {
					id = p.PauseCgroup
				}
				for _, i := range ifaces {
					l := []string{"", id, "", i.Name, p.ID, ns, pod}
					pm.Metrics = append(pm.Metrics,
						metric("container_network_receive_bytes_total", i.RxBytes, 0, l...),
						metric("container_network_receive_packets_total", i.RxPackets, 0, l...),
						metric("container_network_receive_errors_total", i.RxErrors, 0, l...),
						metric("container_network_receive_packets_dropped_total", i.RxDrop, 0, l...),
						metric("container_network_transmit_bytes_total", i.TxBytes, 0, l...),
						metric("container_network_transmit_packets_total", i.TxPackets, 0, l...),
						metric("container_network_transmit_errors_total", i.TxErrors, 0, l...),
						metric("container_network_transmit_packets_dropped_total", i.TxDrop, 0, l...),
					)
				}
			}
		}
		for _, ctr := range ctrs[p.ID] {
			if !ctr.Running {
				continue
			}
			cm := &runtimeapi.ContainerMetrics{ContainerId: ctr.ID, Metrics: c.containerMetrics(ctx, ctr, ns, pod, now, metric)}
			pm.ContainerMetrics = append(pm.ContainerMetrics, cm)
		}
		sort.Slice(pm.ContainerMetrics, func(i, j int) bool { return pm.ContainerMetrics[i].ContainerId < pm.ContainerMetrics[j].ContainerId })
		out[i] = pm
	})
	sort.Slice(out, func(i, j int) bool { return out[i].PodSandboxId < out[j].PodSandboxId })
	c.prune(now)
	return out
}

type metricFunc func(name string, v uint64, ts int64, labels ...string) *runtimeapi.Metric

// containerMetrics is one running container's cAdvisor-style metrics.
func (c *Collector) containerMetrics(ctx context.Context, ctr Container, ns, pod string, now time.Time, metric metricFunc) []*runtimeapi.Metric {
	l := []string{ctr.Metadata.GetName(), ctr.Cgroup, ctr.Image, ctr.ID, ns, pod}
	out := []*runtimeapi.Metric{metric("container_last_seen", uint64(now.Unix()), 0, l...)}
	if !ctr.StartedAt.IsZero() {
		out = append(out, metric("container_start_time_seconds", uint64(ctr.StartedAt.Unix()), 0, l...))
	}
	if ctr.Cgroup != "" {
		s, d := c.cg.ReadWithDetail(ctr.Cgroup)
		if s.HasCPU {
			out = append(out, metric("container_cpu_usage_seconds_total", s.CPU/1e9, 0, l...))
		}
		if d.HasCPUTimes {
			out = append(out,
				metric("container_cpu_user_seconds_total", d.UserNs/1e9, 0, l...),
				metric("container_cpu_system_seconds_total", d.SystemNs/1e9, 0, l...))
		}
		if d.HasCFS {
			out = append(out,
				metric("container_cpu_cfs_periods_total", d.Periods, 0, l...),
				metric("container_cpu_cfs_throttled_periods_total", d.ThrottledPeriods, 0, l...),
				metric("container_cpu_cfs_throttled_seconds_total", d.ThrottledNs/1e9, 0, l...))
		}
		out = append(out,
			metric("container_spec_cpu_period", d.CPUPeriodUs, 0, l...),
			metric("container_spec_cpu_quota", d.CPUQuotaUs, 0, l...),
			metric("container_spec_cpu_shares", d.CPUShares, 0, l...))
		if s.HasMemory {
			out = append(out,
				metric("container_memory_usage_bytes", s.MemUsage, 0, l...),
				metric("container_memory_working_set_bytes", s.MemWorkingSet, 0, l...),
				metric("container_memory_rss", s.MemRSS, 0, l...),
				metric("container_memory_cache", s.MemCache, 0, l...),
				metric("container_spec_memory_limit_bytes", s.MemLimit, 0, l...))
			fl := func(kind, scope string) []string {
				return []string{ctr.Metadata.GetName(), kind, ctr.Cgroup, ctr.Image, ctr.ID, ns, pod, scope}
			}
			// cAdvisor's scopes: the container's own faults, and the
			// hierarchy's (identical here: a container has no children).
			for _, scope := range []string{"container", "hierarchy"} {
				out = append(out,
					metric("container_memory_failures_total", s.PageFaults, 0, fl("pgfault", scope)...),
					metric("container_memory_failures_total", s.MajorPageFaults, 0, fl("pgmajfault", scope)...))
			}
		}
		if d.HasMemory {
			out = append(out,
				metric("container_memory_max_usage_bytes", d.MaxUsage, 0, l...),
				metric("container_memory_mapped_file", d.MappedFile, 0, l...),
				metric("container_memory_kernel_usage", d.KernelUsage, 0, l...),
				metric("container_memory_failcnt", d.Failcnt, 0, l...),
				metric("container_oom_events_total", d.OOMKills, 0, l...),
				metric("container_spec_memory_swap_limit_bytes", d.SwapLimit, 0, l...))
		}
		if s.HasSwap {
			out = append(out, metric("container_memory_swap", s.SwapUsage, 0, l...))
		}
		if s.HasPids {
			out = append(out, metric("container_processes", s.Pids, 0, l...))
		}
		out = append(out,
			metric("container_threads", d.Threads, 0, l...),
			metric("container_threads_max", d.ThreadsMax, 0, l...),
			metric("container_file_descriptors", d.FileDescriptors, 0, l...),
			metric("container_sockets", d.Sockets, 0, l...))
		for _, res := range []string{"cpu", "memory", "io"} {
			if p := s.PSI[res]; p != nil {
				out = append(out, metric("container_pressure_"+res+"_waiting_seconds_total", p.Some.Total/1e6, 0, l...))
				if p.HasFull {
					out = append(out, metric("container_pressure_"+res+"_stalled_seconds_total", p.Full.Total/1e6, 0, l...))
				}
			}
		}
		out = append(out, c.ioMetrics(metric, d.IO, ctr.Metadata.GetName(), ctr.Cgroup, ctr.Image, ctr.ID, ns, pod)...)
	}
	if ctr.WritableLayer != "" {
		fs := []string{ctr.Metadata.GetName(), c.layerFS, ctr.Cgroup, ctr.Image, ctr.ID, ns, pod}
		// Cached: the timestamp says when it was measured.
		if b, _, at, err := c.disk.get(ctx, ctr.WritableLayer, now); err == nil {
			out = append(out, metric("container_fs_usage_bytes", b, at.UnixNano(), fs...))
		}
		var st unix.Statfs_t
		if err := unix.Statfs(ctr.WritableLayer, &st); err == nil {
			out = append(out,
				metric("container_fs_limit_bytes", st.Blocks*uint64(st.Bsize), 0, fs...),
				metric("container_fs_inodes_total", st.Files, 0, fs...),
				metric("container_fs_inodes_free", st.Ffree, 0, fs...))
		}
	}
	return out
}

// ioMetrics are a container's per-device I/O counters, labelled by the
// device's /dev path (and its numbers for blkio) as cAdvisor labels them.
func (c *Collector) ioMetrics(metric metricFunc, devs []DeviceIO, container, id, image, name, ns, pod string) []*runtimeapi.Metric {
	var out []*runtimeapi.Metric
	for _, d := range devs {
		dev := c.deviceName(d.Major, d.Minor)
		fs := []string{container, dev, id, image, name, ns, pod}
		maj, min := strconv.FormatUint(d.Major, 10), strconv.FormatUint(d.Minor, 10)
		out = append(out,
			metric("container_fs_reads_bytes_total", d.ReadBytes, 0, fs...),
			metric("container_fs_reads_total", d.Reads, 0, fs...),
			metric("container_fs_writes_bytes_total", d.WriteBytes, 0, fs...),
			metric("container_fs_writes_total", d.Writes, 0, fs...),
			metric("container_blkio_device_usage_total", d.ReadBytes, 0, container, dev, id, image, maj, min, name, ns, "Read", pod),
			metric("container_blkio_device_usage_total", d.WriteBytes, 0, container, dev, id, image, maj, min, name, ns, "Write", pod))
	}
	return out
}

// deviceName is deviceName of the package, read from sysfs once per
// device.
func (c *Collector) deviceName(major, minor uint64) string {
	key := strconv.FormatUint(major, 10) + ":" + strconv.FormatUint(minor, 10)
	if v, ok := c.devNames.Load(key); ok {
		return v.(string)
	}
	name := deviceName(major, minor)
	if name != "" {
		c.devNames.Store(key, name)
	}
	return name
}
