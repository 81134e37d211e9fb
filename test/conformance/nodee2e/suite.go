package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/test/ginkgoreport"
)

// suiteEnv is what a real run needs (nil for --dry-run).
type suiteEnv struct {
	work, endpoint, nodeIP string
	runtimePid             int // 0: not known (a runtime given by its endpoint)
}

// Commands hidden from the suite where PID 1 is not systemd (this
// development machine): with systemd-run on PATH the suite starts the
// kubelet as a transient unit. Where systemd runs (the VM test bed) it
// does so as upstream's node e2e hosts do, and the specs that restart
// the kubelet with a new configuration can (systemctl).
var hiddenCommands = map[string]bool{"systemd-run": true, "journalctl": true, "systemctl": true}

// systemdBooted says whether systemd is PID 1, as sd_booted(3) tells.
func systemdBooted() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}

// pathDir makes a directory of links to every command of $PATH but the
// hidden ones, to be the suite's whole PATH.
func pathDir(work string) (string, error) {
	hide := hiddenCommands
	if systemdBooted() {
		hide = nil
	}
	dir := filepath.Join(work, "path")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if hide[e.Name()] {
				continue
			}
			link := filepath.Join(dir, e.Name())
			if _, err := os.Lstat(link); err == nil { // earlier PATH entries win
				continue
			}
			os.Symlink(filepath.Join(d, e.Name()), link)
		}
	}
	return dir, nil
}

// kubeletConfig is upstream's test/e2e_node/jenkins/default-kubelet-config.yaml
// plus what this host needs: it is cgroup v1 (hybrid), and swap is off but
// say so; and the feature gates given. The gates go to the kubelet's config
// only, not to the suite's --feature-gates, which would replace the config's
// gates and make the specs that check for a gate skip themselves.
func kubeletConfig(podCIDR string, gates map[string]bool) map[string]any {
	cfg := map[string]any{
		"apiVersion":                       "kubelet.config.k8s.io/v1beta1",
		"kind":                             "KubeletConfiguration",
		"cgroupDriver":                     "cgroupfs",
		"cgroupRoot":                       "/",
		"podCIDR":                          podCIDR,
		"volumeStatsAggPeriod":             "10s",
		"fileCheckFrequency":               "10s",
		"evictionPressureTransitionPeriod": "30s",
		"evictionHard": map[string]string{
			"memory.available": "250Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
		},
		"evictionMinimumReclaim": map[string]string{"nodefs.available": "5%", "nodefs.inodesFree": "5%"},
		"serializeImagePulls":    false,
		"failCgroupV1":           false,
		"failSwapOn":             false,
	}
	if len(gates) > 0 {
		cfg["featureGates"] = gates
	}
	return cfg
}

// parseGates reads kubelet feature gates as the kubelet's --feature-gates
// flag has them: "Name=true,Other=false".
func parseGates(s string) (map[string]bool, error) {
	gates := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, val, ok := strings.Cut(kv, "=")
		b, err := strconv.ParseBool(val)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("feature gate %q: want Name=true or Name=false", kv)
		}
		gates[name] = b
	}
	return gates, nil
}

// kubeletFlags are added to the suite's kubelet command line (they win
// over its config). --system-cgroups: the suite sets /system on hosts
// without systemd, and the kubelet then moves every process of the root
// cgroup, the whole shared machine, into it. --runtime-cgroups names the
// runtime's cgroup where it is known (cgroup v2), as upstream's node e2e
// jobs name containerd's unit: the Summary API reports the "runtime"
// system container from it, and its spec expects one.
func kubeletFlags(nodeIP, runtimeCgroup string) []string {
	flags := []string{"--node-ip=" + nodeIP, "--cluster-domain=cluster.local", "--system-cgroups="}
	if runtimeCgroup != "" {
		flags = append(flags, "--runtime-cgroups="+runtimeCgroup)
	}
	return flags
}

// unifiedCgroup is the cgroup v2 path of a process ("" on v1 or when it
// cannot be read).
func unifiedCgroup(pid int) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || strings.Count(string(b), "\n") != 1 {
		return ""
	}
	path, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "0::")
	if !ok {
		return ""
	}
	return path
}

// result is the suite's report, with how many specs not selected the skip
// list left out (by its entry) and ginkgo's error.
type result struct {
	*ginkgoreport.Summary
	bySkipList map[string]int
	exitErr    error
	report     string
}

func runSuite(ctx context.Context, log *slog.Logger, o options, skips []skipEntry, env *suiteEnv) (*result, error) {
	focus := []string(o.focus)
	if len(focus) == 0 {
		focus = []string{defaultFocus}
	}
	skip := append([]string(nil), o.skip...)
	if !o.noDefault {
		skip = append(skip, defaultSkip)
	}
	args := []string{
		"--nodes", fmt.Sprint(o.nodes), "--timeout", o.timeout.String(), "--no-color", "-v",
		"--output-dir", o.out, "--json-report", "report.json", "--junit-report", "junit.xml",
	}
	if o.dryRun { // ginkgo dry-runs in one process only
		args[1] = "1"
		args = append(args, "--dry-run")
	}
	for _, f := range focus {
		args = append(args, "--focus", f)
	}
	for _, s := range skip {
		args = append(args, "--skip", s)
	}
	for _, s := range skips {
		args = append(args, "--skip", s.re)
	}
	// ginkgo runs a precompiled suite in the binary's directory, and the
	// suite writes its kubeconfig, kubelet config and static pod dirs to
	// its working directory and starts the kubelet beside itself: both are
	// links in a directory of this run.
	suiteDir := o.out
	if env != nil {
		suiteDir = filepath.Join(env.work, "suite")
	}
	if err := os.MkdirAll(suiteDir, 0o755); err != nil {
		return nil, err
	}
	for _, b := range []string{"e2e_node.test", "kubelet"} {
		os.Remove(filepath.Join(suiteDir, b))
		if err := os.Symlink(filepath.Join(o.binDir, b), filepath.Join(suiteDir, b)); err != nil {
			return nil, err
		}
	}
	args = append(args, filepath.Join(suiteDir, "e2e_node.test"), "--")
	logPath := filepath.Join(o.out, "ginkgo.log")
	cmd := exec.CommandContext(ctx, filepath.Join(o.binDir, "ginkgo"))
	cmd.Dir = suiteDir
	if env != nil {
		path, err := pathDir(env.work)
		if err != nil {
			return nil, err
		}
		hostname, _ := os.Hostname()
		gates, err := parseGates(o.gates)
		if err != nil {
			return nil, err
		}
		cfg, _ := json.MarshalIndent(kubeletConfig(berthSubnet, gates), "", "  ")
		cfgPath := filepath.Join(env.work, "kubelet-base.yaml")
		if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
			return nil, err
		}
		os.WriteFile(filepath.Join(o.out, "kubelet-base.yaml"), cfg, 0o644)
		args = append(args,
			"--container-runtime-endpoint="+env.endpoint,
			"--image-service-endpoint="+env.endpoint,
			"--prepull-images=false",
			"--node-name="+hostname,
			"--kubelet-config-file="+cfgPath,
			"--kubelet-flags="+strings.Join(kubeletFlags(env.nodeIP, unifiedCgroup(env.runtimePid)), " "),
			"--dns-domain=cluster.local",
			"--report-dir="+o.out,
			// The kubelet keeps running after the last spec, to tear its
			// pods down before stopServices stops it.
			"--stop-services=false",
		)
		cmd.Env = append(os.Environ(), "PATH="+path)
	}
	args = append(args, o.testArgs...)
	cmd.Args = append(cmd.Args, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On interruption the whole process group (ginkgo and its test
	// processes, which stop the kubelet) gets SIGTERM, not SIGKILL.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Minute
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "%s\n\n", strings.Join(cmd.Args, " "))
	var w io.Writer = logf
	if o.verbose {
		w = io.MultiWriter(logf, os.Stdout)
	}
	cmd.Stdout, cmd.Stderr = w, w
	log.Info("running the suite", "nodes", o.nodes, "focus", focus, "skip", skip, "skip-list", len(skips), "log", logPath)
	runErr := cmd.Run()
	res, err := readReport(filepath.Join(o.out, "report.json"), focus, skip, skips)
	if err != nil {
		return nil, fmt.Errorf("the suite wrote no report (%v); see %s: %w", runErr, logPath, err)
	}
	res.exitErr = runErr
	return res, nil
}

// readReport reads ginkgo's JSON report and counts, among the specs not
// selected, those the skip list left out of the focus and skip given.
func readReport(path string, focus, skip []string, skips []skipEntry) (*result, error) {
	sum, err := ginkgoreport.Read(path)
	if err != nil {
		return nil, err
	}
	match := func(res []string, s string) bool {
		for _, r := range res {
			if ok, _ := regexp.MatchString(r, s); ok {
				return true
			}
		}
		return false
	}
	res := &result{Summary: sum, bySkipList: map[string]int{}, report: path}
	for _, name := range sum.NotSelectedNames {
		if !match(focus, name) || match(skip, name) {
			continue
		}
		for _, e := range skips {
			if ok, _ := regexp.MatchString(e.re, name); ok {
				res.bySkipList[e.re]++
				break
			}
		}
	}
	return res, nil
}

func (r *result) print(w io.Writer, took time.Duration) {
	for _, s := range r.Skips {
		fmt.Fprintf(w, "  [SKIPPED] %s\n", s)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  [FAILED] %s\n", f)
	}
	listed := 0
	for _, n := range r.bySkipList {
		listed += n
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped (%d not selected, %d of them by the skip list) in %s; report %s\n",
		r.Passed, r.Failed, r.Skipped, r.NotSelected, listed, took.Round(time.Second), r.report)
	if r.exitErr != nil && r.Failed == 0 {
		fmt.Fprintf(w, "ginkgo: %v\n", r.exitErr)
	}
}

// skipEntry is one regex of the checked-in skip list, with its reason.
type skipEntry struct{ re, reason string }

// readSkipList reads one regex a line, each right after the comment lines
// (#) giving its reason; an entry without a reason is an error.
func readSkipList(path string) ([]skipEntry, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("skip list: %w", err)
	}
	defer f.Close()
	var out []skipEntry
	var reason []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			reason = nil
		case strings.HasPrefix(line, "#"):
			reason = append(reason, strings.TrimSpace(strings.TrimPrefix(line, "#")))
		default:
			if len(reason) == 0 {
				return nil, fmt.Errorf("%s:%d: entry %q has no reason (a # comment line right above it)", path, n, line)
			}
			if _, err := regexp.Compile(line); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			out = append(out, skipEntry{re: line, reason: strings.Join(reason, " ")})
			reason = nil
		}
	}
	return out, sc.Err()
}
