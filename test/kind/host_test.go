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
// Mounts and rules are Docker's only: under its directories, of its
// chains and bridges. hack/test runs the other packages beside this one,
// and their pods' mounts and CNI rules come and go meanwhile.
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
	dirs := dockerDirs(t)
	return hostState{
		containers: lines("ps", "-a", "--format", "{{.Names}}"),
		networks:   lines("network", "ls", "--format", "{{.Name}}"),
		volumes:    lines("volume", "ls", "--format", "{{.Name}}"),
		mounts:     slices.DeleteFunc(mountPoints(t), func(m string) bool { return !dockerMount(m, dirs) }),
		rules:      slices.DeleteFunc(iptablesRules(t), func(r string) bool { return !dockerRule.MatchString(r) }),
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

// dockerDirs are where Docker's mounts live: its data root (container
// roots, volumes, and what a node's shared mounts propagate there), the
// exec roots of hack/dockerd's daemon and of a system one (network
// namespaces).
func dockerDirs(t *testing.T) []string {
	t.Helper()
	out, err := run(time.Minute, "", "docker", "info", "--format", "{{.DockerRootDir}}")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("docker info: %v\n%s", err, out)
	}
	return []string{strings.TrimSpace(out), "/run/berth-dockerd", "/run/docker", "/var/run/docker"}
}

// dockerMount tells whether the mount point is under one of dirs.
func dockerMount(point string, dirs []string) bool {
	for _, d := range dirs {
		if point == d || strings.HasPrefix(point, d+"/") {
			return true
		}
	}
	return false
}

// dockerRule matches the iptables lines Docker makes: its chains, and
// the rules of a network's bridge (br- and the network id's first 12
// hex digits; berth's CNI bridges are named otherwise).
var dockerRule = regexp.MustCompile(`DOCKER|\bbr-[0-9a-f]{12}\b`)

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

// TestHostStateFilters: the leak check sees what Docker and a kind
// cluster leave, and nothing of the pods other packages run meanwhile.
func TestHostStateFilters(t *testing.T) {
	dirs := []string{"/var/cache/berth-dev/docker", "/run/berth-dockerd", "/run/docker", "/var/run/docker"}
	for point, want := range map[string]bool{
		"/var/cache/berth-dev/docker/overlay2/0123/merged":                      true,
		"/var/cache/berth-dev/docker/volumes/0123/_data/lib/kubelet/pods/x/vol": true,
		"/run/berth-dockerd/netns/abc":                                          true,
		"/run/docker/netns/abc":                                                 true,
		"/var/cache/berth-dev/docker-other":                                     false,
		"/run/berth/netns/cni-1234":                                             false,
		"/tmp/berth-e2e-1/root/containers/0123/rootfs":                          false,
		"/": false,
	} {
		if got := dockerMount(point, dirs); got != want {
			t.Errorf("dockerMount(%q) = %v, want %v", point, got, want)
		}
	}
	for rule, want := range map[string]bool{
		"nat -A DOCKER -d 127.0.0.1/32 ! -i br-4f3c2a1b0d9e -p tcp -m tcp --dport 41235 -j DNAT --to-destination 172.18.0.2:6443": true,
		"filter -A FORWARD -o br-4f3c2a1b0d9e -j DOCKER":                         true,
		"nat -A POSTROUTING -s 172.18.0.0/16 ! -o br-4f3c2a1b0d9e -j MASQUERADE": true,
		"filter :DOCKER-USER - ":                                                 true,
		"nat -A POSTROUTING -s 10.88.0.7/32 -m comment --comment \"name: berth id: 0123\" -j CNI-0a1b2c3d4e5f60718293a4b5": false,
		"filter -A FORWARD -i berth0 -j ACCEPT":                                                      false,
		"nat -A CNI-HOSTPORT-DNAT -p tcp -m tcp --dport 18080 -j DNAT --to-destination 10.88.0.7:80": false,
	} {
		if got := dockerRule.MatchString(rule); got != want {
			t.Errorf("dockerRule matches %q: %v, want %v", rule, got, want)
		}
	}
}
