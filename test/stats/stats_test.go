package stats_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

func (e *env) containerStats(id string) *runtimeapi.ContainerStats {
	e.T.Helper()
	resp, err := e.D.Runtime.ContainerStats(framework.Ctx(e.T), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		e.T.Fatalf("ContainerStats %s: %v", id, err)
	}
	return resp.Stats
}

func (e *env) podStats(id string) *runtimeapi.PodSandboxStats {
	e.T.Helper()
	resp, err := e.D.Runtime.PodSandboxStats(framework.Ctx(e.T), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: id})
	if err != nil {
		e.T.Fatalf("PodSandboxStats %s: %v", id, err)
	}
	return resp.Stats
}

func (e *env) exec(id string, cmd ...string) string {
	e.T.Helper()
	resp, err := e.D.Runtime.ExecSync(framework.Ctx(e.T), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 20})
	if err != nil || resp.ExitCode != 0 {
		e.T.Fatalf("exec %q: %v %v", cmd, err, resp)
	}
	return string(resp.Stdout)
}

func labelled(name string) func(*runtimeapi.ContainerConfig) {
	return func(c *runtimeapi.ContainerConfig) { c.Labels = map[string]string{"name": name} }
}

// TestStatsMove: CPU, memory, writable layer and process numbers follow
// what the containers do.
func TestStatsMove(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("busy")
	burner := e.Run(pod, podCfg, "burner", "while :; do :; done", labelled("burner"))
	// awk holds a 60 MB string (anonymous memory) while it waits.
	hog := e.Run(pod, podCfg, "hog", `exec awk 'BEGIN { s = sprintf("%60000000s", ""); print "allocated"; system("sleep 100000") }'`, labelled("hog"))
	writer := e.Run(pod, podCfg, "writer", "dd if=/dev/zero of=/blob bs=1M count=3 2>/dev/null; touch /done; sleep 100000", labelled("writer"))

	// CPU: the counter moves, and a rate comes from two samples.
	first := e.containerStats(burner)
	if first.Cpu == nil || first.Cpu.UsageCoreNanoSeconds == nil || first.Cpu.Timestamp == 0 {
		t.Fatalf("burner cpu: %v", first.Cpu)
	}
	time.Sleep(1500 * time.Millisecond)
	second := e.containerStats(burner)
	used := second.Cpu.UsageCoreNanoSeconds.Value - first.Cpu.UsageCoreNanoSeconds.Value
	// Thresholds far below a core: the machine may be busy with others.
	if used < 1e8 {
		t.Fatalf("burner used %d ns of CPU in 1.5 s", used)
	}
	if second.Cpu.UsageNanoCores == nil || second.Cpu.UsageNanoCores.Value < 5e7 {
		t.Fatalf("burner usage_nano_cores %v, want a busy core's worth", second.Cpu.UsageNanoCores)
	}
	t.Logf("burner: %.2f cores", float64(second.Cpu.UsageNanoCores.Value)/1e9)

	// Memory: the working set and RSS grow by what the shell holds.
	deadline := time.Now().Add(30 * time.Second)
	var mem *runtimeapi.MemoryUsage
	for {
		mem = e.containerStats(hog).Memory
		if mem != nil && mem.WorkingSetBytes.Value > 50e6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hog memory never grew: %v", mem)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if mem.RssBytes.Value < 50e6 || mem.UsageBytes.Value < mem.WorkingSetBytes.Value || mem.PageFaults.Value == 0 {
		t.Fatalf("hog memory: %v", mem)
	}
	t.Logf("hog: working set %d, rss %d, usage %d, page faults %d", mem.WorkingSetBytes.Value, mem.RssBytes.Value, mem.UsageBytes.Value, mem.PageFaults.Value)

	// Writable layer: the file written shows (first measured now).
	for !strings.Contains(e.exec(writer, "ls", "/"), "done") {
		time.Sleep(100 * time.Millisecond)
	}
	layer := e.containerStats(writer).WritableLayer
	if layer == nil || layer.UsedBytes.Value < 3<<20 || layer.InodesUsed.Value < 2 || layer.FsId.GetMountpoint() == "" || layer.Timestamp == 0 {
		t.Fatalf("writer writable layer: %v", layer)
	}

	// The pod: its own cgroup (the parent given), three containers.
	ps := e.podStats(pod)
	if ps.Attributes.Id != pod || ps.Attributes.Metadata.Name != "busy" {
		t.Fatalf("pod attributes %v", ps.Attributes)
	}
	l := ps.Linux
	if l.Cpu.UsageCoreNanoSeconds.Value < second.Cpu.UsageCoreNanoSeconds.Value || l.Memory.WorkingSetBytes.Value < 50e6 ||
		l.Process.ProcessCount.Value < 4 || len(l.Containers) != 3 {
		t.Fatalf("pod stats: cpu %v memory %v process %v, %d containers", l.Cpu, l.Memory, l.Process, len(l.Containers))
	}
	// eth0 is in the list of interfaces as well as the default: the
	// kubelet's summary reports the list as the pod's interfaces.
	if l.Network == nil || l.Network.DefaultInterface.GetName() != "eth0" || len(l.Network.Interfaces) != 1 || l.Network.Interfaces[0].Name != "eth0" {
		t.Fatalf("pod network %v", l.Network)
	}

	// Filters.
	list := func(f *runtimeapi.ContainerStatsFilter) []string {
		resp, err := e.D.Runtime.ListContainerStats(framework.Ctx(t), &runtimeapi.ListContainerStatsRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range resp.Stats {
			ids = append(ids, s.Attributes.Id)
		}
		sort.Strings(ids)
		return ids
	}
	all := []string{burner, hog, writer}
	sort.Strings(all)
	for _, tt := range []struct {
		name string
		f    *runtimeapi.ContainerStatsFilter
		want []string
	}{
		{"pod", &runtimeapi.ContainerStatsFilter{PodSandboxId: pod}, all},
		{"id prefix", &runtimeapi.ContainerStatsFilter{Id: hog[:12]}, []string{hog}},
		{"label", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"name": "burner"}}, []string{burner}},
		{"no match", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"name": "nobody"}}, nil},
	} {
		if got := list(tt.f); strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("filter %s: %v, want %v", tt.name, got, tt.want)
		}
	}

	// An exited container: gone from the list, its stats without cgroup.
	done := e.Run(pod, podCfg, "done", "true", nil)
	e.WaitExit(done, 20*time.Second)
	if got := list(&runtimeapi.ContainerStatsFilter{Id: done}); len(got) != 0 {
		t.Errorf("an exited container is listed: %v", got)
	}
	if st := e.containerStats(done); st.Cpu != nil || st.WritableLayer == nil {
		t.Errorf("exited container stats: %v", st)
	}
	if _, err := e.D.Runtime.ContainerStats(framework.Ctx(t), &runtimeapi.ContainerStatsRequest{ContainerId: "nonexistent"}); err == nil {
		t.Error("ContainerStats of a missing container: no error")
	}
}

// TestNetworkCounters: a pod's interface counters, read in its network
// namespace, grow with the traffic it sends and receives.
func TestNetworkCounters(t *testing.T) {
	e := newEnv(t)
	server, serverCfg := e.RunPod("server")
	web := e.Run(server, serverCfg, "web", "mkdir -p /www && dd if=/dev/zero of=/www/big bs=1M count=2 2>/dev/null && exec httpd -f -p 8080 -h /www", nil)
	client, clientCfg := e.RunPod("client")
	cli := e.Run(client, clientCfg, "cli", "sleep 100000", nil)
	st, err := e.D.Runtime.PodSandboxStatus(framework.Ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: server})
	if err != nil {
		t.Fatal(err)
	}
	ip := st.Status.Network.Ip
	for {
		r, err := e.D.Runtime.ExecSync(framework.Ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: web, Cmd: []string{"wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/big"}, Timeout: 5})
		if err == nil && r.ExitCode == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	iface := func(pod string) *runtimeapi.NetworkInterfaceUsage {
		n := e.podStats(pod).Linux.Network
		if n == nil || n.DefaultInterface == nil {
			t.Fatalf("pod %s has no network stats", pod)
		}
		return n.DefaultInterface
	}
	cBefore, sBefore := iface(client), iface(server)
	for range 3 {
		e.exec(cli, "wget", "-q", "-O", "/dev/null", "http://"+ip+":8080/big")
	}
	cAfter, sAfter := iface(client), iface(server)
	rx := cAfter.RxBytes.Value - cBefore.RxBytes.Value
	tx := sAfter.TxBytes.Value - sBefore.TxBytes.Value
	if rx < 6<<20 || tx < 6<<20 || cAfter.TxBytes.Value <= cBefore.TxBytes.Value {
		t.Fatalf("3 × 2 MiB: client received %d, server sent %d (client sent %d → %d)", rx, tx, cBefore.TxBytes.Value, cAfter.TxBytes.Value)
	}
	t.Logf("client eth0 rx +%d, server eth0 tx +%d", rx, tx)

	// The same counters as cAdvisor metrics.
	descs, err := e.D.Runtime.ListMetricDescriptors(framework.Ctx(t), &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for _, d := range descs.Descriptors {
		keys[d.Name] = d.LabelKeys
	}
	for _, name := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_rss",
		"container_network_receive_bytes_total", "container_network_transmit_bytes_total", "container_fs_usage_bytes"} {
		if _, ok := keys[name]; !ok {
			t.Errorf("no metric descriptor %s", name)
		}
	}
	metrics, err := e.D.Runtime.ListPodSandboxMetrics(framework.Ctx(t), &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got uint64
	for _, pm := range metrics.PodMetrics {
		for _, m := range pm.Metrics {
			if len(m.LabelValues) != len(keys[m.Name]) {
				t.Fatalf("metric %s: values %v for keys %v", m.Name, m.LabelValues, keys[m.Name])
			}
			if pm.PodSandboxId == client && m.Name == "container_network_receive_bytes_total" && m.LabelValues[3] == "eth0" {
				got = m.Value.Value
			}
		}
		for _, cm := range pm.ContainerMetrics {
			for _, m := range cm.Metrics {
				if len(m.LabelValues) != len(keys[m.Name]) {
					t.Fatalf("metric %s: values %v for keys %v", m.Name, m.LabelValues, keys[m.Name])
				}
			}
		}
	}
	if got < cAfter.RxBytes.Value {
		t.Fatalf("container_network_receive_bytes_total of the client: %d, want at least %d", got, cAfter.RxBytes.Value)
	}
}
