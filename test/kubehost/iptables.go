// Package kubehost is what the harnesses that run a stock kubelet on this
// machine (test/kubelet, test/conformance/nodee2e, bench/density) share: the
// machine-wide kubelet lock, the removal of a kubelet's cgroup tree, the
// undoing of what the kubelet and its CNI plugins leave in iptables, and
// the configuration of a kubelet without an API server.
package kubehost

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/mattn/go-shellwords"
)

var tables = []string{"filter", "nat", "mangle"}

// KubeChains lists the KUBE-* chains of iptables and ip6tables as
// "binary/table/chain".
func KubeChains() []string {
	var out []string
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range tables {
			rules, err := exec.Command(bin, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(rules), "\n") {
				if c, ok := strings.CutPrefix(line, "-N "); ok && strings.HasPrefix(c, "KUBE-") {
					out = append(out, bin+"/"+table+"/"+c)
				}
			}
		}
	}
	return out
}

// DeleteChain removes "binary/table/chain" as KubeChains names it: the
// rules of other chains that jump to it, then the chain. It goes on past
// a failed step and returns every failure.
func DeleteChain(c string) error {
	parts := strings.SplitN(c, "/", 3)
	if len(parts) != 3 {
		return fmt.Errorf("chain %q is not binary/table/chain", c)
	}
	bin, table, chain := parts[0], parts[1], parts[2]
	rules, err := exec.Command(bin, "-w", "-t", table, "-S").Output()
	if err != nil {
		return fmt.Errorf("%s -t %s -S: %w", bin, table, err)
	}
	var errs []error
	for _, line := range strings.Split(string(rules), "\n") {
		if !strings.HasPrefix(line, "-A ") || !strings.HasSuffix(line, " -j "+chain) && !strings.Contains(line, " -j "+chain+" ") {
			continue
		}
		args, err := shellwords.Parse(line)
		if err != nil {
			errs = append(errs, fmt.Errorf("parse %q: %w", line, err))
			continue
		}
		args[0] = "-D"
		if out, err := exec.Command(bin, append([]string{"-w", "-t", table}, args...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s %s: %w: %s", bin, table, strings.Join(args, " "), err, out))
		}
	}
	for _, op := range []string{"-F", "-X"} {
		if out, err := exec.Command(bin, "-w", "-t", table, op, chain).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s %s %s: %w: %s", bin, table, op, chain, err, out))
		}
	}
	return errors.Join(errs...)
}

// DeleteNATRulesNaming deletes the nat rules that mention s (a pod
// subnet's prefix: the bridge plugin's masquerade rules of pods never torn
// down) with the per-pod CNI-* chains they jump to. It returns the rules
// it found, and the deletions that failed.
func DeleteNATRulesNaming(s string) ([]string, error) {
	out, _ := exec.Command("iptables", "-w", "-t", "nat", "-S").Output()
	var rules []string
	var errs []error
	chains := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "-A ") || !strings.Contains(line, s) {
			continue
		}
		rules = append(rules, line)
		args, err := shellwords.Parse(line)
		if err != nil || len(args) < 2 {
			continue
		}
		if perPod(args[1]) { // a rule of a per-pod chain: the chain goes
			chains[args[1]] = true
			continue
		}
		for i, a := range args {
			if a == "-j" && i+1 < len(args) && perPod(args[i+1]) {
				chains[args[i+1]] = true
			}
		}
		args[0] = "-D"
		if out, err := exec.Command("iptables", append([]string{"-w", "-t", "nat"}, args...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("iptables -t nat %s: %w: %s", strings.Join(args, " "), err, out))
		}
	}
	for c := range chains {
		exec.Command("iptables", "-w", "-t", "nat", "-F", c).Run()
		exec.Command("iptables", "-w", "-t", "nat", "-X", c).Run()
	}
	return rules, errors.Join(errs...)
}

// perPod tells the bridge plugin's per-pod chains from portmap's shared ones.
func perPod(chain string) bool {
	return strings.HasPrefix(chain, "CNI-") && !strings.HasPrefix(chain, "CNI-HOSTPORT")
}
