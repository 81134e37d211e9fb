package density

import (
	"fmt"
	"math"
	"strings"

	"github.com/berth-runtime/berth/bench/report"
)

// table prints the runs side by side, the first runtime's figure over the
// second's as the ratio.
func table(rs []*result) string {
	var b strings.Builder
	if len(rs) == 0 {
		return ""
	}
	head := []string{"figure"}
	for _, r := range rs {
		head = append(head, r.Runtime)
	}
	// The ratio is berth's figure over containerd's, whatever the order.
	num, den := 0, 1
	if len(rs) == 2 && rs[0].Runtime == "containerd" {
		num, den = 1, 0
	}
	if len(rs) == 2 {
		head = append(head, rs[num].Runtime+"/"+rs[den].Runtime)
	}
	var rows [][]string
	row := func(name string, prec int, f func(*result) float64) {
		cells := []string{name}
		var v []float64
		for _, r := range rs {
			x := f(r)
			v = append(v, x)
			cells = append(cells, report.Num(x, prec))
		}
		if len(rs) == 2 {
			ratio := math.NaN()
			if v[den] != 0 {
				ratio = v[num] / v[den]
			}
			cells = append(cells, report.Num(ratio, 2))
		}
		rows = append(rows, cells)
	}
	row("pods Running (of the pods created)", 0, func(r *result) float64 { return float64(r.Running) })
	row("Running pods with an IP of their own on the CNI network", 0, func(r *result) float64 { return float64(r.PodIPs) })
	row("time to all Running (s)", 1, func(r *result) float64 { return r.AllRunning })
	row("pod start p50: container started − kubelet saw the pod (s)", 2, func(r *result) float64 { return float64(r.StartStatus[0]) })
	row("pod start p99: container started − kubelet saw the pod (s)", 2, func(r *result) float64 { return float64(r.StartStatus[1]) })
	row("pod start p50: Running in the kubelet's /pods − manifest written (s)", 1, func(r *result) float64 { return float64(r.StartSeen[0]) })
	row("pod start p99: Running in the kubelet's /pods − manifest written (s)", 1, func(r *result) float64 { return float64(r.StartSeen[1]) })
	row("pod start p50: kubelet_pod_start_duration_seconds (s)", 1, func(r *result) float64 { return float64(r.StartKubelet[0]) })
	row("pod start p99: kubelet_pod_start_duration_seconds (s)", 1, func(r *result) float64 { return float64(r.StartKubelet[1]) })
	for _, ph := range []struct{ key, label string }{{"start", "while starting"}, {"running", "all running"}, {"teardown", "teardown"}, {"all", "whole run"}} {
		row("PLEG relist p50, "+ph.label+" (ms)", 1, func(r *result) float64 { return 1000 * float64(r.PLEG[ph.key].P50) })
		row("PLEG relist p99, "+ph.label+" (ms)", 1, func(r *result) float64 { return 1000 * float64(r.PLEG[ph.key].P99) })
		row("PLEG relists over 1 s, "+ph.label+" (of all)", 0, func(r *result) float64 { return r.PLEG[ph.key].Over1s })
		row("PLEG relists, "+ph.label, 0, func(r *result) float64 { return r.PLEG[ph.key].Relists })
		row("PLEG relist mean, "+ph.label+" (ms)", 1, func(r *result) float64 { return 1000 * float64(r.PLEG[ph.key].Mean) })
		row("PLEG relist interval mean, "+ph.label+" (s)", 2, func(r *result) float64 { return float64(r.PLEG[ph.key].Interval) })
	}
	for _, ph := range []struct{ key, label string }{{"start", "while starting"}, {"teardown", "teardown"}} {
		row("CPU, "+ph.label+": daemon (s)", 1, func(r *result) float64 { return r.CPU[ph.key].Daemon.Self })
		row("CPU, "+ph.label+": the daemon's reaped children (CNI plugins) (s)", 1, func(r *result) float64 { return r.CPU[ph.key].Daemon.Children })
		row("CPU, "+ph.label+": kubelet (s)", 1, func(r *result) float64 { return r.CPU[ph.key].Kubelet.Self })
		row("CPU, "+ph.label+": machine busy (of 2 CPUs)", 2, func(r *result) float64 { return r.CPU[ph.key].Busy })
	}
	row("CPU of the per-pod processes in their lives (with their children: libcontainer, runc) (s)", 1, func(r *result) float64 { return r.PodProcsCPU })
	row("daemon RSS idle, kubelet connected (MB)", 1, func(r *result) float64 { return r.DaemonRSS["idle"] })
	row("daemon RSS peak while starting (MB)", 1, func(r *result) float64 { return r.DaemonRSS["peak"] })
	row("daemon RSS, all running (MB)", 1, func(r *result) float64 { return r.DaemonRSS["running"] })
	row("daemon RSS after the teardown (MB)", 1, func(r *result) float64 { return r.DaemonRSS["after"] })
	row("per pod: runtime processes' PSS (MB)", 2, func(r *result) float64 { return r.PSSPerPod })
	row("per pod: pod cgroup usage_in_bytes (MB)", 2, func(r *result) float64 { return r.Cgroups.Usage })
	row("per pod: pod cgroup anon + kernel (MB)", 2, func(r *result) float64 { return r.Cgroups.AnonKernel })
	row("per pod: the container's own PSS (sh, sleep) (MB)", 2, func(r *result) float64 { return r.ContainerPSS })
	row("kubelet RSS, all running (MB)", 1, func(r *result) float64 { return r.KubeletRSS })
	row("teardown: no ready sandbox, no running container (s)", 1, func(r *result) float64 { return r.Teardown })
	row("leaks", 0, func(r *result) float64 { return float64(r.Leaks) })

	right := make([]bool, len(head))
	for i := 1; i < len(right); i++ {
		right[i] = true
	}
	report.Markdown(&b, head, rows, right)
	b.WriteString("\n")
	for _, r := range rs {
		gates := ""
		if r.FeatureGates != "" {
			gates = "; kubelet feature gates " + r.FeatureGates
		}
		fmt.Fprintf(&b, "%s (%s%s; %s, load %s before, %s after): per-pod processes with all running:", r.Runtime, r.Version, gates, r.Started.Format("2006-01-02T15:04Z"), r.LoadBefore, r.LoadAfter)
		for _, g := range r.Procs {
			fmt.Fprintf(&b, " %s ×%d RSS %.2f PSS %.2f MB each;", g.Comm, g.Count, g.RSS, g.PSS)
		}
		fmt.Fprintf(&b, " pod cgroups hold %s; after the teardown:", r.Cgroups.Procs)
		if len(r.ProcsAfter) == 0 {
			b.WriteString(" none")
		}
		for _, g := range r.ProcsAfter {
			fmt.Fprintf(&b, " %s ×%d", g.Comm, g.Count)
		}
		b.WriteString("\n")
	}
	for _, ph := range []string{"start", "running", "teardown"} {
		fmt.Fprintf(&b, "\nThe kubelet's CRI calls, %s (kubelet_runtime_operations_duration_seconds; by total time):\n\n", ph)
		b.WriteString("| runtime | call | count | mean (ms) | p99 (ms) | errors |\n| --- | --- | ---: | ---: | ---: | ---: |\n")
		for _, r := range rs {
			for i, o := range r.Ops[ph] {
				if i == 8 {
					break
				}
				fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %.0f |\n", r.Runtime, o.Type, o.Count, report.Num(1000*float64(o.Mean), 1), report.Num(1000*float64(o.P99), 0), o.Errors)
			}
		}
	}
	return b.String()
}
