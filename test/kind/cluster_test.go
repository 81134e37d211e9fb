package kind

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cluster is a kind cluster of berth nodes made for one test.
type cluster struct {
	t          *testing.T
	name       string
	kind       string // the kind binary
	kubectlBin string
	kubeconfig string
	workers    []string // node (and container) names
	control    string
}

// Node names follow kind's scheme: NAME-control-plane, NAME-worker, NAME-worker2.
func workerNames(name string, n int) []string {
	var w []string
	for i := 1; i <= n; i++ {
		s := name + "-worker"
		if i > 1 {
			s += fmt.Sprint(i)
		}
		w = append(w, s)
	}
	return w
}

// nodesOnlyConfig is the cluster config a user writes: nodes and nothing
// else. Whatever kind hard-codes for containerd must be handled by the
// node image.
func nodesOnlyConfig(workers int) string {
	var b strings.Builder
	b.WriteString("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n")
	for range workers {
		b.WriteString("- role: worker\n")
	}
	return b.String()
}

func requireEnv(t *testing.T, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("needs %s: $%s is unset (hack/test sets it up with hack/kind)", what, name)
	}
	return v
}

// createCluster runs `kind create cluster` with a nodes-only config and
// registers its deletion. It does not wait for the nodes: the caller
// measures that.
func createCluster(t *testing.T, name string, workers int) *cluster {
	t.Helper()
	c := &cluster{
		t:          t,
		name:       name,
		kind:       requireEnv(t, "BERTH_KIND", "kind"),
		kubeconfig: filepath.Join(t.TempDir(), "kubeconfig"),
		workers:    workerNames(name, workers),
		control:    name + "-control-plane",
		kubectlBin: "kubectl",
	}
	if d := os.Getenv("BERTH_KUBELET_DIR"); d != "" {
		c.kubectlBin = filepath.Join(d, "kubectl")
	}
	image := requireEnv(t, "BERTH_KIND_IMAGE", "the berth kind node image")
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(cfg, []byte(nodesOnlyConfig(workers)), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := run(15*time.Minute, "", c.kind, "create", "cluster", "--name", name, "--image", image,
		"--config", cfg, "--kubeconfig", c.kubeconfig, "--retain")
	if err != nil {
		c.dumpNodes()
		c.delete()
		t.Fatalf("kind create cluster: %v\n%s", err, out)
	}
	t.Logf("kind create cluster %s (1 control plane, %d workers): %.1fs", name, workers, time.Since(start).Seconds())
	return c
}

func (c *cluster) nodes() []string { return append([]string{c.control}, c.workers...) }

// delete removes the cluster; it is safe to call twice.
func (c *cluster) delete() {
	out, err := run(5*time.Minute, "", c.kind, "delete", "cluster", "--name", c.name, "--kubeconfig", c.kubeconfig)
	if err != nil {
		c.t.Errorf("kind delete cluster %s: %v\n%s", c.name, err, out)
	}
}

// dumpNodes logs what a failure needs: the runtime's and the kubelet's
// journal of every node and the pods berth runs there.
func (c *cluster) dumpNodes() {
	for _, n := range c.nodes() {
		out, _ := run(time.Minute, "", "docker", "exec", n, "sh", "-c",
			"journalctl --no-pager -n 80 -u berth -u kubelet; crictl pods; crictl ps -a")
		c.t.Logf("--- node %s:\n%s", n, out)
	}
}

func (c *cluster) kubectl(stdin string, args ...string) (string, error) {
	return run(2*time.Minute, stdin, c.kubectlBin, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
}

func (c *cluster) mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := c.kubectl(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlCmd is a kubectl command to start and stop by hand (logs -f,
// port-forward, attach).
func (c *cluster) kubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.kubectlBin, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
}

// startKubectl starts a kubectl command that runs until ctx ends (logs
// -f, port-forward, attach) and returns a scanner of its stdout, its stdin
// when asked for, and the wait to call once ctx is cancelled.
func (c *cluster) startKubectl(t *testing.T, ctx context.Context, withStdin bool, args ...string) (*bufio.Scanner, io.WriteCloser, func()) {
	t.Helper()
	cmd := c.kubectlCmd(ctx, args...)
	var in io.WriteCloser
	if withStdin {
		var err error
		if in, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return bufio.NewScanner(out), in, func() { _ = cmd.Wait() }
}

// onNode runs a shell command inside a node container.
func (c *cluster) onNode(node, script string) (string, error) {
	return run(2*time.Minute, "", "docker", "exec", node, "sh", "-c", script)
}

func (c *cluster) mustOnNode(t *testing.T, node, script string) string {
	t.Helper()
	out, err := c.onNode(node, script)
	if err != nil {
		t.Fatalf("on %s: %s: %v\n%s", node, script, err, out)
	}
	return out
}

// pod is the part of a Pod object the test reads.
type pod struct {
	Metadata struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase             string            `json:"phase"`
		PodIP             string            `json:"podIP"`
		Conditions        []condition       `json:"conditions"`
		ContainerStatuses []containerStatus `json:"containerStatuses"`
		EphemeralStatuses []containerStatus `json:"ephemeralContainerStatuses"`
	} `json:"status"`
}

type condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

type containerStatus struct {
	Name         string          `json:"name"`
	Ready        bool            `json:"ready"`
	RestartCount int             `json:"restartCount"`
	ContainerID  string          `json:"containerID"`
	State        json.RawMessage `json:"state"`
}

func (p *pod) ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

func (p *pod) String() string {
	var cs []string
	for _, c := range p.Status.ContainerStatuses {
		cs = append(cs, fmt.Sprintf("%s ready=%v restarts=%d %s", c.Name, c.Ready, c.RestartCount, c.State))
	}
	return fmt.Sprintf("%s on %s: %s ip=%s ready=%v [%s]", p.Metadata.Name, p.Spec.NodeName, p.Status.Phase,
		p.Status.PodIP, p.ready(), strings.Join(cs, "; "))
}

func (c *cluster) pods(namespace, selector string) ([]pod, error) {
	args := []string{"get", "pods", "-n", namespace, "-o", "json"}
	if selector != "" {
		args = append(args, "-l", selector)
	}
	out, err := c.kubectl("", args...)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	var l struct {
		Items []pod `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (c *cluster) getPod(name string) (*pod, error) {
	out, err := c.kubectl("", "get", "pod", name, "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	var p pod
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

func (c *cluster) waitPod(t *testing.T, name string, timeout time.Duration, what string, cond func(*pod) bool) *pod {
	t.Helper()
	var got *pod
	waitFor(t, timeout, name+": "+what, func() (bool, string) {
		p, err := c.getPod(name)
		if err != nil {
			return false, err.Error()
		}
		got = p
		return cond(p), p.String()
	})
	return got
}

// nodesReady reports whether every node is Ready, and a description.
func (c *cluster) nodesReady() (bool, string) {
	out, err := c.kubectl("", "get", "nodes", "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{" "}{end}`)
	if err != nil {
		return false, out
	}
	fields := strings.Fields(out)
	if len(fields) != len(c.nodes()) {
		return false, out
	}
	for _, f := range fields {
		if !strings.HasSuffix(f, "=True") {
			return false, out
		}
	}
	return true, out
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for {
		ok, desc := cond()
		if ok {
			t.Logf("%s: after %.1fs", what, time.Since(start).Seconds())
			return time.Since(start)
		}
		if desc != "" {
			last = desc
		}
		if time.Since(start) > timeout {
			t.Fatalf("waited %s for %s; last: %s", timeout, what, last)
		}
		time.Sleep(time.Second)
	}
}

// run runs a command to completion (or until timeout) and returns its
// combined output.
func run(timeout time.Duration, stdin, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String(), fmt.Errorf("%s %s: still running after %s", name, strings.Join(args, " "), timeout)
	}
	return out.String(), err
}

// httpGet fetches url with a short timeout and returns the body.
func httpGet(url string) (string, error) {
	cl := &http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// nodeIP is a node's address on kind's Docker network.
func nodeIP(t *testing.T, node string) string {
	t.Helper()
	out, err := run(time.Minute, "", "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", node)
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("docker inspect %s: %v %s", node, err, out)
	}
	return strings.TrimSpace(out)
}
