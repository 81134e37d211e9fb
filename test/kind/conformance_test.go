package kind

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// conformanceSubset is the CI subset of Kubernetes Conformance run on this
// test's cluster (issue 17): fast [Conformance] specs that need a cluster,
// not one node (the node e2e subset covers those): DNS, Services, pod
// networking across nodes, Deployments, and a few pod basics. Each entry is
// a spec's full text as e2e.test v1.37.2 names it and selects exactly that
// spec; the whole selection is hack/kind-conformance by hand.
var conformanceSubset = []string{
	"[sig-node] Pods should be submitted and removed [Conformance]",
	"[sig-node] Pods should support remote command execution over websockets [Conformance]",
	"[sig-node] Pods should support retrieving logs from the container over websockets [Conformance]",
	"[sig-node] Container Runtime blackbox test on terminated container should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set [Conformance]",
	"[sig-node] Downward API should provide pod name, namespace and IP address as env vars [Conformance]",
	"[sig-node] Kubelet when scheduling a busybox command in a pod should print the output to logs [Conformance]",
	"[sig-network] DNS should provide DNS for the cluster [Conformance]",
	"[sig-network] DNS should provide DNS for services [Conformance]",
	"[sig-network] DNS should provide /etc/hosts entries for the cluster [Conformance]",
	"[sig-network] Services should serve a basic endpoint from pods [Conformance]",
	"[sig-network] Services should serve multiport endpoints from pods [Conformance]",
	"[sig-network] Services should be able to create a functioning NodePort service [Conformance]",
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [Conformance]",
	"[sig-network] Networking Granular Checks: Pods should function for node-pod communication: udp [LinuxOnly] [Conformance]",
	"[sig-network] EndpointSlice should create Endpoints and EndpointSlices for Pods matching a Service [Conformance]",
	"[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service ProxyWithPath [Conformance]",
	"[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones [Conformance]",
	"[sig-apps] Deployment should run the lifecycle of a Deployment [Conformance]",
	"[sig-apps] ReplicaSet should serve a basic image on each replica with a public image [Conformance]",
}

// The e2e images the subset's pods run (agnhost 2.66.1, and 2.55 for the
// Deployment lifecycle, busybox, nginx, glibc-dns-testing for DNS); pause
// is preloaded. Loading only these saves part of the 30-70 s of loading
// all; an image missed here is pulled from the test registry (slower, not
// a failure).
const conformanceImages = `e2e-test-images/(agnhost:2\.(66\.1|55)|busybox:1\.37\.0-2|nginx:1\.27\.0-2|glibc-dns-testing:2\.1\.1)$`

var conformanceCounts = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed, (\d+) skipped`)

// checkConformanceSubset runs the subset through hack/kind-conformance on
// the cluster (the same e2e.test, ginkgo, skip list and image loading as
// the full run), fails on any failed spec and unless every spec of the
// subset passed, then waits for the suite's namespaces to go, so the
// checks after it see only their own pods.
func checkConformanceSubset(t *testing.T, c *cluster) {
	dir := os.Getenv("BERTH_KUBELET_DIR")
	for _, b := range []string{"e2e.test", "ginkgo"} {
		// hack/kind-conformance would build a missing one under the
		// heavy-build lock, which whoever runs this test may hold.
		if _, err := os.Stat(filepath.Join(dir, b)); dir == "" || err != nil {
			t.Fatalf("%s is not built in $BERTH_KUBELET_DIR (%q): run hack/kubelet e2e.test ginkgo", b, dir)
		}
	}
	namespaces := func() (string, error) {
		return c.kubectl("", "get", "namespaces", "-o", "jsonpath={.items[*].metadata.name}")
	}
	before, err := namespaces()
	if err != nil {
		t.Fatalf("kubectl get namespaces: %v\n%s", err, before)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	focus := make([]string, len(conformanceSubset))
	for i, s := range conformanceSubset {
		focus[i] = regexp.QuoteMeta(s)
	}
	// e2e.test leaves a directory in $TMPDIR per process unless
	// hack/kind-conformance gives it one of its own.
	kubercs := filepath.Join(os.TempDir(), "test-kuberc*")
	kubercsBefore, _ := filepath.Glob(kubercs)
	start := time.Now()
	out, err := run(15*time.Minute, "", "bash", filepath.Join(root, "hack", "kind-conformance"),
		"--cluster", c.name, "--kubeconfig", c.kubeconfig, "--nodes", "4",
		"--images", conformanceImages, "--focus", strings.Join(focus, "|"))
	t.Logf("hack/kind-conformance on %s: %.0fs", c.name, time.Since(start).Seconds())
	if err != nil {
		t.Fatalf("hack/kind-conformance: %v\n%s", err, out)
	}
	m := conformanceCounts.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("hack/kind-conformance printed no counts:\n%s", out)
	}
	passed, _ := strconv.Atoi(m[1])
	if m[2] != "0" || passed != len(conformanceSubset) {
		t.Fatalf("want all %d specs of the subset passed, got %q:\n%s", len(conformanceSubset), m[0], out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "kind-conformance: ") {
			t.Log(l) // the steps' times
		}
	}
	t.Log(m[0])
	if after, _ := filepath.Glob(kubercs); len(after) > len(kubercsBefore) {
		t.Errorf("the subset left %d directories %s", len(after)-len(kubercsBefore), kubercs)
	}
	waitFor(t, 3*time.Minute, "the e2e namespaces gone", func() (bool, string) {
		now, err := namespaces()
		return err == nil && now == before, now
	})
}
