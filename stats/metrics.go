package stats

import (
	"context"
	"sort"
	"time"

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

func metricDefs() []metricDef {
	counter, gauge := runtimeapi.MetricType_COUNTER, runtimeapi.MetricType_GAUGE
	return []metricDef{
		{"container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", ctrLabels, counter},
		{"container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed.", ctrLabels, gauge},
		{"container_memory_working_set_bytes", "Current working set in bytes.", ctrLabels, gauge},
		{"container_memory_rss", "Size of RSS in bytes.", ctrLabels, gauge},
		{"container_memory_cache", "Number of bytes of page cache memory.", ctrLabels, gauge},
		{"container_memory_swap", "Container swap usage in bytes.", ctrLabels, gauge},
		{"container_spec_memory_limit_bytes", "Memory limit for the container.", ctrLabels, gauge},
		{"container_processes", "Number of processes running inside the container.", ctrLabels, gauge},
		{"container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", fsLabels, gauge},
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
			cm := &runtimeapi.ContainerMetrics{ContainerId: ctr.ID}
			l := []string{ctr.Metadata.GetName(), ctr.Cgroup, ctr.Image, ctr.ID, ns, pod}
			if ctr.Cgroup != "" {
				s := c.cg.Read(ctr.Cgroup)
				if s.HasCPU {
					cm.Metrics = append(cm.Metrics, metric("container_cpu_usage_seconds_total", s.CPU/1e9, 0, l...))
				}
				if s.HasMemory {
					cm.Metrics = append(cm.Metrics,
						metric("container_memory_usage_bytes", s.MemUsage, 0, l...),
						metric("container_memory_working_set_bytes", s.MemWorkingSet, 0, l...),
						metric("container_memory_rss", s.MemRSS, 0, l...),
						metric("container_memory_cache", s.MemCache, 0, l...),
						metric("container_spec_memory_limit_bytes", s.MemLimit, 0, l...),
					)
				}
				if s.HasSwap {
					cm.Metrics = append(cm.Metrics, metric("container_memory_swap", s.SwapUsage, 0, l...))
				}
				if s.HasPids {
					cm.Metrics = append(cm.Metrics, metric("container_processes", s.Pids, 0, l...))
				}
			}
			if ctr.WritableLayer != "" {
				b, _, at := c.disk.get(ctr.WritableLayer, now)
				// Cached: the timestamp says when it was measured.
				cm.Metrics = append(cm.Metrics, metric("container_fs_usage_bytes", b, at.UnixNano(),
					ctr.Metadata.GetName(), c.layerFS, ctr.Cgroup, ctr.Image, ctr.ID, ns, pod))
			}
			pm.ContainerMetrics = append(pm.ContainerMetrics, cm)
		}
		sort.Slice(pm.ContainerMetrics, func(i, j int) bool { return pm.ContainerMetrics[i].ContainerId < pm.ContainerMetrics[j].ContainerId })
		out[i] = pm
	})
	sort.Slice(out, func(i, j int) bool { return out[i].PodSandboxId < out[j].PodSandboxId })
	c.prune(now)
	return out
}
