package kind

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostState is what a kind cluster adds to the host: Docker objects,
// mounts, iptables rules and processes. `kind delete cluster` (and the
// removal of the kind network the test made) must take all of it away.
type hostState struct {
	containers, networks, volumes []string
	mounts                        []string
	rules                         []string
	shims                         []string // containerd-shim processes (one per running container)
}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	lines := func(args ...string) []string {
		out, err := run(time.Minute, "", "docker", args...)
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return sortedFields(out)
	}
	return hostState{
		containers: lines("ps", "-a", "--format", "{{.Names}}"),
		networks:   lines("network", "ls", "--format", "{{.Name}}"),
		volumes:    lines("volume", "ls", "--format", "{{.Name}}"),
		mounts:     mountPoints(t),
		rules:      iptablesRules(t),
		shims:      shimProcesses(),
	}
}

func sortedFields(s string) []string {
	f := strings.Fields(s)
	slices.Sort(f)
	return f
}

func mountPoints(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var m []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 {
			m = append(m, fs[4])
		}
	}
	slices.Sort(m)
	return m
}

var counters = regexp.MustCompile(`^\[\d+:\d+\] `)

// iptablesRules are the filter and nat rules and chains, counters dropped.
func iptablesRules(t *testing.T) []string {
	t.Helper()
	var rules []string
	for _, table := range []string{"filter", "nat"} {
		out, err := run(time.Minute, "", "iptables-save", "-t", table)
		if err != nil {
			t.Fatalf("iptables-save -t %s: %v\n%s", table, err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if l == "" || strings.HasPrefix(l, "#") || l == "COMMIT" || strings.HasPrefix(l, "*") {
				continue
			}
			if strings.HasPrefix(l, ":") { // ":CHAIN POLICY [p:b]"
				if i := strings.LastIndex(l, " ["); i > 0 {
					l = l[:i]
				}
			}
			rules = append(rules, table+" "+counters.ReplaceAllString(l, ""))
		}
	}
	slices.Sort(rules)
	return rules
}

func shimProcesses() []string {
	var shims []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if cmd := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cmd, "containerd-shim") {
			shims = append(shims, e.Name()+" "+cmd)
		}
	}
	slices.Sort(shims)
	return shims
}

// checkHostLike fails the test for everything the cluster left behind.
func checkHostLike(t *testing.T, before hostState) {
	t.Helper()
	after := snapshotHost(t)
	for _, d := range []struct {
		what          string
		before, after []string
	}{
		{"docker containers", before.containers, after.containers},
		{"docker networks", before.networks, after.networks},
		{"docker volumes", before.volumes, after.volumes},
		{"mounts", before.mounts, after.mounts},
		{"iptables rules", before.rules, after.rules},
		{"containerd-shim processes", before.shims, after.shims},
	} {
		if left := added(d.before, d.after); len(left) > 0 {
			t.Errorf("kind delete cluster left %s behind:\n  %s", d.what, strings.Join(left, "\n  "))
		}
	}
}

func added(before, after []string) []string {
	var a []string
	for _, x := range after {
		if !slices.Contains(before, x) {
			a = append(a, x)
		}
	}
	return a
}
