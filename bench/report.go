package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/berth-runtime/berth/bench/report"
)

// Report is one run of the benchmark against one or more runtimes.
type Report struct {
	Label    string             `json:"label,omitempty"`
	Targets  string             `json:"targets,omitempty"`
	Date     string             `json:"date"`
	Kernel   string             `json:"kernel"`
	CPUs     int                `json:"cpus"`
	Params   Params             `json:"params"`
	Runtimes []string           `json:"runtimes"`
	Results  map[string]*Result `json:"results"`
}

// Result is what one runtime measured. Times are milliseconds except the
// pull (seconds); memory is MB (MiB).
type Result struct {
	Runtime            string           `json:"runtime"`
	Version            string           `json:"version"`
	DaemonPID          int              `json:"daemon_pid"`
	DaemonRSSIdleMB    float64          `json:"daemon_rss_idle_mb"`
	Pull               *Dist            `json:"pull_s,omitempty"`
	PodStart           *Dist            `json:"pod_start_ms,omitempty"`
	StartSteps         map[string]*Dist `json:"pod_start_steps_ms,omitempty"`
	Teardown           *Dist            `json:"teardown_ms,omitempty"`
	TeardownSteps      map[string]*Dist `json:"teardown_steps_ms,omitempty"`
	Exec               *Dist            `json:"exec_sync_ms,omitempty"`
	LoneExec           *Dist            `json:"lone_exec_sync_ms,omitempty"`
	Concurrent         int              `json:"concurrent_pods,omitempty"`
	ConcurrentStart    *Dist            `json:"concurrent_start_total_ms,omitempty"`
	ConcurrentTeardown *Dist            `json:"concurrent_teardown_total_ms,omitempty"`
	Scale              []ScalePoint     `json:"scale,omitempty"`
	// InPath are berth's own step times inside the sequential pods'
	// RunPodSandbox and StopPodSandbox, from its log (-log).
	InPath map[string]*Dist `json:"in_path_ms,omitempty"`
}

// ScalePoint is measured with Pods pods running.
type ScalePoint struct {
	Pods           int         `json:"pods"`
	DaemonRSSMB    float64     `json:"daemon_rss_mb"`
	PerPodRSSMB    float64     `json:"per_pod_rss_mb"`
	PerPodPSSMB    float64     `json:"per_pod_pss_mb"`
	Processes      []ProcGroup `json:"processes"`
	ListPodSandbox *Dist       `json:"list_pod_sandbox_ms"`
	ListContainers *Dist       `json:"list_containers_ms"`
}

// ProcGroup totals the per-pod processes of one command name.
type ProcGroup struct {
	Comm  string  `json:"comm"`
	Count int     `json:"count"`
	RSSMB float64 `json:"rss_mb"`
	PSSMB float64 `json:"pss_mb"`
}

func (r *Result) at(pods int) *ScalePoint {
	for i := range r.Scale {
		if r.Scale[i].Pods == pods {
			return &r.Scale[i]
		}
	}
	return nil
}

func writeReport(path string, r *Report) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// Steps is berth's own primitive steps, timed by `bench timings` on
// the same machine in the same run (its -json output).
type Steps struct {
	Label      string `json:"label"`
	Iterations int    `json:"iterations"`
	Steps      []Step `json:"steps"`
}

// Step is one primitive. InSum marks those whose medians add up to the
// floor a pod start is compared with.
type Step struct {
	Name    string    `json:"name"`
	Phase   string    `json:"phase"` // start or teardown
	InSum   bool      `json:"in_sum"`
	P50     float64   `json:"p50_ms"`
	P90     float64   `json:"p90_ms"`
	Samples []float64 `json:"samples_ms,omitempty"`
}

// mergeSteps joins timings of the same label (taken before and after a
// benchmark, so that they see the same load as it on average): samples
// are pooled and the percentiles recomputed.
func mergeSteps(all []*Steps) []*Steps {
	var out []*Steps
	byLabel := map[string]*Steps{}
	for _, s := range all {
		m := byLabel[s.Label]
		if m == nil {
			m = &Steps{Label: s.Label}
			byLabel[s.Label] = m
			out = append(out, m)
		}
		m.Iterations += s.Iterations
		for _, st := range s.Steps {
			i := slices.IndexFunc(m.Steps, func(x Step) bool { return x.Name == st.Name })
			if i < 0 {
				m.Steps = append(m.Steps, Step{Name: st.Name, Phase: st.Phase, InSum: st.InSum, P50: st.P50, P90: st.P90})
				i = len(m.Steps) - 1
			}
			m.Steps[i].Samples = append(m.Steps[i].Samples, st.Samples...)
		}
	}
	for _, m := range out {
		for i := range m.Steps {
			if len(m.Steps[i].Samples) > 0 {
				d := newDist(m.Steps[i].Samples)
				m.Steps[i].P50, m.Steps[i].P90 = d.P50, d.P90
			}
		}
	}
	return out
}

func tableCommand(args []string) error {
	fs := flag.NewFlagSet("table", flag.ContinueOnError)
	var steps endpointFlag
	fs.Var(&steps, "steps", "bench timings -json output (repeatable; matched to reports by label)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("usage: bench table [-steps FILE]... REPORT.json...")
	}
	return writeTable(os.Stdout, fs.Args(), steps)
}

// writeTable prints the table of the reports and the steps files (bench
// timings -json) read from these paths.
func writeTable(w io.Writer, reports, steps []string) error {
	var reps []*Report
	for _, p := range reports {
		r := &Report{}
		if err := report.ReadJSON(p, r); err != nil {
			return err
		}
		reps = append(reps, r)
	}
	var st []*Steps
	for _, p := range steps {
		s := &Steps{}
		if err := report.ReadJSON(p, s); err != nil {
			return err
		}
		st = append(st, s)
	}
	printTable(w, reps, mergeSteps(st))
	return nil
}

// target is a bound on the first/second ratio, and optionally on the
// first runtime's absolute value.
type target struct {
	ratio float64
	abs   float64 // 0: none
}

// targetSets are issue 9's targets, by CNI chain.
var targetSets = map[string]map[string]target{
	"": nil,
	"plain": {
		"start50": {ratio: 0.3}, "teardown50": {ratio: 0.4},
	},
	"portmap": {
		"start50": {ratio: 0.4}, "teardown50": {ratio: 0.55},
	},
	// A 1 GB single-layer pull (issue 20); the five-layer one is pull50's
	// common target.
	"pull-huge": {"pull50": {ratio: 0.8}},
}

// commonTargets hold whatever the chain.
var commonTargets = map[string]target{
	"exec50": {ratio: 0.5},
	"rss100": {ratio: 0.5},
	"pss100": {ratio: 0.2},
	"lps250": {ratio: 0.5, abs: 1},
	"lc250":  {ratio: 0.5, abs: 1},
	"pull50": {ratio: 0.6},
}

type row struct {
	key, name string
	get       func(*Result) (float64, bool)
	format    string
}

func distRow(key, name string, d func(*Result) *Dist, pick func(*Dist) float64) row {
	return row{key: key, name: name, format: "%.1f", get: func(r *Result) (float64, bool) {
		x := d(r)
		if x == nil || x.N == 0 {
			return 0, false
		}
		return pick(x), true
	}}
}

func p50(d *Dist) float64 { return d.P50 }
func p90(d *Dist) float64 { return d.P90 }
func p99(d *Dist) float64 { return d.P99 }

func stepDist(m func(*Result) map[string]*Dist, k string) func(*Result) *Dist {
	return func(r *Result) *Dist {
		if mm := m(r); mm != nil {
			return mm[k]
		}
		return nil
	}
}

func scaleRow(key, name, format string, pods int, f func(*ScalePoint) float64) row {
	return row{key: key, name: fmt.Sprintf(name, pods), format: format, get: func(r *Result) (float64, bool) {
		pt := r.at(pods)
		if pt == nil {
			return 0, false
		}
		return f(pt), true
	}}
}

func rows(rep *Report) []row {
	starts := func(r *Result) map[string]*Dist { return r.StartSteps }
	stops := func(r *Result) map[string]*Dist { return r.TeardownSteps }
	inPath := func(r *Result) map[string]*Dist { return r.InPath }
	out := []row{
		distRow("start50", "pod start p50 (ms)", func(r *Result) *Dist { return r.PodStart }, p50),
		distRow("start90", "pod start p90 (ms)", func(r *Result) *Dist { return r.PodStart }, p90),
		distRow("start99", "pod start p99 (ms)", func(r *Result) *Dist { return r.PodStart }, p99),
		distRow("", "· RunPodSandbox p50", stepDist(starts, "RunPodSandbox"), p50),
		distRow("", "· · netns (in berth's RunPodSandbox)", stepDist(inPath, "netns"), p50),
		distRow("", "· · CNI ADD", stepDist(inPath, "cni_add"), p50),
		distRow("", "· · monitor + pause, beside CNI ADD", stepDist(inPath, "pause"), p50),
		distRow("", "· CreateContainer p50", stepDist(starts, "CreateContainer"), p50),
		distRow("", "· StartContainer p50", stepDist(starts, "StartContainer"), p50),
		distRow("teardown50", "teardown p50 (ms)", func(r *Result) *Dist { return r.Teardown }, p50),
		distRow("teardown90", "teardown p90 (ms)", func(r *Result) *Dist { return r.Teardown }, p90),
		distRow("teardown99", "teardown p99 (ms)", func(r *Result) *Dist { return r.Teardown }, p99),
		distRow("", "· StopContainer p50", stepDist(stops, "StopContainer"), p50),
		distRow("", "· RemoveContainer p50", stepDist(stops, "RemoveContainer"), p50),
		distRow("", "· StopPodSandbox p50", stepDist(stops, "StopPodSandbox"), p50),
		distRow("", "· · pause stop (in berth's StopPodSandbox)", stepDist(inPath, "pause_stop"), p50),
		distRow("", "· · monitor stop", stepDist(inPath, "monitor_stop"), p50),
		distRow("", "· · CNI DEL, beside both", stepDist(inPath, "cni_del"), p50),
		distRow("", "· RemovePodSandbox p50", stepDist(stops, "RemovePodSandbox"), p50),
		distRow("concstart", fmt.Sprintf("%d pods at once: start, total (ms)", rep.Params.Concurrent),
			func(r *Result) *Dist { return r.ConcurrentStart }, p50),
		distRow("concstop", fmt.Sprintf("%d pods at once: teardown, total (ms)", rep.Params.Concurrent),
			func(r *Result) *Dist { return r.ConcurrentTeardown }, p50),
		distRow("exec50", "ExecSync `true` p50 (ms)", func(r *Result) *Dist { return r.Exec }, p50),
		distRow("exec99", "ExecSync `true` p99 (ms)", func(r *Result) *Dist { return r.Exec }, p99),
		distRow("lexec50", fmt.Sprintf("ExecSync `true` after %d ms idle, p50 (ms)", rep.Params.ExecGapMS),
			func(r *Result) *Dist { return r.LoneExec }, p50),
		distRow("lexec99", fmt.Sprintf("ExecSync `true` after %d ms idle, p99 (ms)", rep.Params.ExecGapMS),
			func(r *Result) *Dist { return r.LoneExec }, p99),
	}
	for _, n := range rep.Params.ListPods {
		out = append(out,
			scaleRow(fmt.Sprintf("lps%d", n), "ListPodSandbox p50, %d pods (ms)", "%.2f", n, func(p *ScalePoint) float64 { return p.ListPodSandbox.P50 }),
			scaleRow(fmt.Sprintf("lc%d", n), "ListContainers p50, %d pods (ms)", "%.2f", n, func(p *ScalePoint) float64 { return p.ListContainers.P50 }),
		)
	}
	out = append(out, row{key: "rssidle", name: "daemon RSS idle (MB)", format: "%.1f", get: func(r *Result) (float64, bool) {
		return r.DaemonRSSIdleMB, r.DaemonRSSIdleMB > 0 && len(r.Scale) > 0
	}})
	for _, n := range rep.Params.ListPods {
		out = append(out,
			scaleRow(fmt.Sprintf("rss%d", n), "daemon RSS, %d pods (MB)", "%.1f", n, func(p *ScalePoint) float64 { return p.DaemonRSSMB }),
			scaleRow(fmt.Sprintf("prss%d", n), "per-pod RSS, %d pods (MB)", "%.2f", n, func(p *ScalePoint) float64 { return p.PerPodRSSMB }),
			scaleRow(fmt.Sprintf("pss%d", n), "per-pod PSS, %d pods (MB)", "%.2f", n, func(p *ScalePoint) float64 { return p.PerPodPSSMB }),
		)
	}
	pull := distRow("pull50", "pull of -pull-image p50 (s)", func(r *Result) *Dist { return r.Pull }, p50)
	pull.format = "%.2f"
	pull90 := distRow("pull90", "pull of -pull-image p90 (s)", func(r *Result) *Dist { return r.Pull }, p90)
	pull90.format = "%.2f"
	return append(out, pull, pull90)
}

func targetFor(rep *Report, key string) (target, bool) {
	if t, ok := targetSets[rep.Targets][key]; ok {
		return t, true
	}
	if rep.Targets != "" {
		if t, ok := commonTargets[key]; ok {
			return t, true
		}
	}
	return target{}, false
}

// printTable prints one markdown table: a section per report, each figure
// for every runtime, the first/second ratio and the target where one is set.
func printTable(w io.Writer, reps []*Report, steps []*Steps) {
	if len(reps) == 0 {
		return
	}
	names := reps[0].Runtimes
	header := []string{"figure"}
	header = append(header, names...)
	two := len(names) >= 2
	if two {
		header = append(header, names[0]+"/"+names[1], "target")
	}
	var lines [][]string
	for _, rep := range reps {
		label := rep.Label
		if label == "" {
			label = "run"
		}
		lines = append(lines, []string{"**" + label + "**"})
		for _, rw := range rows(rep) {
			vals := make([]float64, len(names))
			line := []string{rw.name}
			any := false
			for i, n := range names {
				r := rep.Results[n]
				v, ok := 0.0, false
				if r != nil {
					v, ok = rw.get(r)
				}
				vals[i] = v
				if ok {
					any = true
					line = append(line, fmt.Sprintf(rw.format, v))
				} else {
					line = append(line, "")
				}
			}
			if !any {
				continue
			}
			if two {
				ratio := ""
				if vals[1] > 0 && line[1] != "" && line[2] != "" {
					ratio = fmt.Sprintf("%.2f", vals[0]/vals[1])
				}
				line = append(line, ratio, "")
				if t, ok := targetFor(rep, rw.key); ok && ratio != "" {
					r := vals[0] / vals[1]
					met := r <= t.ratio && (t.abs == 0 || vals[0] <= t.abs)
					s := fmt.Sprintf("≤ %.2f", t.ratio)
					if t.abs > 0 {
						s += fmt.Sprintf(", ≤ %g ms", t.abs)
					}
					if met {
						s += " met"
					} else {
						s += " **missed**"
					}
					line[len(line)-1] = s
				}
			}
			lines = append(lines, line)
		}
	}
	writeMarkdown(w, header, lines)

	// What the per-pod memory is made of.
	for _, rep := range reps {
		for _, n := range rep.Runtimes {
			r := rep.Results[n]
			for _, pt := range r.Scale {
				var parts []string
				for _, g := range pt.Processes {
					parts = append(parts, fmt.Sprintf("%s ×%d: RSS %.2f, PSS %.2f MB each", g.Comm, g.Count, g.RSSMB/float64(g.Count), g.PSSMB/float64(g.Count)))
				}
				fmt.Fprintf(w, "\n%s, per-pod processes at %d pods: %s", n, pt.Pods, strings.Join(parts, "; "))
			}
		}
	}
	fmt.Fprintln(w)

	for _, s := range steps {
		printSteps(w, s, reps)
	}
}

func printSteps(w io.Writer, s *Steps, reps []*Report) {
	var rep *Report
	for _, r := range reps {
		if r.Label == s.Label {
			rep = r
		}
	}
	fmt.Fprintf(w, "\nberth's primitive steps, %s (bench timings, before and after the benchmark, median of %d):\n\n", s.Label, s.Iterations)
	var lines [][]string
	sum := 0.0
	var in []string
	for _, st := range s.Steps {
		mark := ""
		if st.InSum {
			sum += st.P50
			mark = "yes"
			in = append(in, st.Name)
		}
		lines = append(lines, []string{st.Phase, st.Name, fmt.Sprintf("%.2f", st.P50), fmt.Sprintf("%.2f", st.P90), mark})
	}
	lines = append(lines, []string{"start", "**sum of the steps marked**", fmt.Sprintf("%.2f", sum), "", ""})
	if rep != nil && len(rep.Runtimes) > 0 {
		if r := rep.Results[rep.Runtimes[0]]; r != nil && r.PodStart != nil && sum > 0 {
			ratio := r.PodStart.P50 / sum
			verdict := "met"
			if ratio > 1.3 {
				verdict = "**missed**"
			}
			lines = append(lines, []string{"start", fmt.Sprintf("%s pod start p50 %.1f ms / sum", rep.Runtimes[0], r.PodStart.P50),
				fmt.Sprintf("%.2f", ratio), "", "≤ 1.30 " + verdict})
		}
	}
	writeMarkdown(w, []string{"phase", "step", "p50 (ms)", "p90 (ms)", "in sum"}, lines)
}

// writeMarkdown writes a table, its columns of numbers right aligned.
func writeMarkdown(w io.Writer, header []string, lines [][]string) {
	report.Markdown(w, header, lines, report.NumericColumns(header, lines))
}
