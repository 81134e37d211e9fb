package kind

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKindCluster makes one cluster of 1 control plane and 2 workers and
// runs every check against it in order: later checks (pause, kill,
// restart) disturb the cluster the earlier ones use.
func TestKindCluster(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (Docker, iptables)")
	}
	registry := requireEnv(t, "BERTH_TEST_REGISTRY", "the local test registry")
	requireEnv(t, "BERTH_KIND", "kind")
	requireEnv(t, "BERTH_KIND_IMAGE", "the berth kind node image")

	before := snapshotHost(t)
	hadKindNetwork := slices.Contains(before.networks, "kind")
	name := "berth-e2e-" + randomSuffix()
	c := createCluster(t, name, 2)
	deleted := false
	defer func() {
		if t.Failed() {
			c.dumpNodes()
		}
		if !deleted {
			c.delete()
		}
	}()
	w1, w2 := c.workers[0], c.workers[1]

	t.Run("nodes ready, berth in containerd's place", func(t *testing.T) {
		d := waitFor(t, 5*time.Minute, "every node Ready", c.nodesReady)
		t.Logf("all nodes Ready %.1fs after kind returned", d.Seconds())
		waitFor(t, 5*time.Minute, "every kube-system pod Running and ready", func() (bool, string) {
			pods, err := c.pods("kube-system", "")
			if err != nil {
				return false, err.Error()
			}
			var bad []string
			for _, p := range pods {
				if p.Status.Phase != "Running" || !p.ready() {
					bad = append(bad, p.String())
				}
			}
			return len(pods) > 0 && len(bad) == 0, strings.Join(bad, "\n")
		})
		for _, n := range c.nodes() {
			out := c.mustOnNode(t, n, "crictl version")
			if !strings.Contains(out, "RuntimeName:  berth") {
				t.Errorf("%s: crictl does not talk to berth:\n%s", n, out)
			}
			if out, err := c.onNode(n, "ps -e -o comm= | grep -x -e containerd -e containerd-shim"); err == nil {
				t.Errorf("%s: containerd runs:\n%s", n, out)
			}
			out = c.mustOnNode(t, n, "crictl images -o json")
			if strings.Contains(out, `"pinned": false`) && !strings.Contains(out, `"pinned": true`) {
				t.Errorf("%s: no preloaded image is pinned:\n%s", n, out)
			}
		}
	})

	// The kubelet collects images every 5 minutes (its first run, at its
	// start, finds no image filesystem stats yet) and considers only
	// images it has seen at an earlier look: the unused image goes into w2
	// and w2's kubelet is set up for the collection now; the GC check
	// comes after the checks that need no w2, which fill the wait.
	dockerOK(t, "pull", registry+"/library/busybox:1.36")
	dockerOK(t, "tag", registry+"/library/busybox:1.36", busybox)
	gc := startImageGC(t, c, w2)
	defer gc.restore(t)

	t.Run("kind load docker-image and image-archive", func(t *testing.T) {
		dockerOK(t, "pull", registry+"/library/busybox:1.36")
		dockerOK(t, "tag", registry+"/library/busybox:1.36", busybox)
		kindOK(t, c, "load", "docker-image", busybox)

		dir := t.TempDir()
		marker := "marker-" + randomSuffix()
		writeFile(t, filepath.Join(dir, "marker"), marker+"\n")
		writeFile(t, filepath.Join(dir, "Dockerfile"), "FROM "+busybox+"\nCOPY marker /marker\n")
		dockerOK(t, "build", "-t", "berth.test/marker:v1", dir)
		kindOK(t, c, "load", "docker-image", "berth.test/marker:v1")
		c.mustKubectl(t, manifest(markerPod, w1, w2), "apply", "-f", "-")
		c.waitPod(t, "marker", 2*time.Minute, "Succeeded", func(p *pod) bool { return p.Status.Phase == "Succeeded" })
		if out := c.mustKubectl(t, "", "logs", "marker"); strings.TrimSpace(out) != marker {
			t.Errorf("marker pod printed %q, want %q", out, marker)
		}

		archive := filepath.Join(dir, "archive.tar")
		dockerOK(t, "tag", "berth.test/marker:v1", "berth.test/marker:archive")
		dockerOK(t, "save", "-o", archive, "berth.test/marker:archive")
		kindOK(t, c, "load", "image-archive", archive)
		for _, n := range c.nodes() {
			if out := c.mustOnNode(t, n, "crictl images"); !strings.Contains(out, "berth.test/marker") || !strings.Contains(out, "archive") {
				t.Errorf("%s: image-archive not loaded:\n%s", n, out)
			}
		}
	})
	if t.Failed() {
		t.FailNow() // every workload below runs the loaded busybox
	}

	var webA *pod
	t.Run("deployment over both workers, services, DNS, host port", func(t *testing.T) {
		c.mustKubectl(t, manifest(webManifests, w1, w2), "apply", "-f", "-")
		c.mustKubectl(t, manifest(nodePods, w1, w2), "apply", "-f", "-")
		var web []pod
		waitFor(t, 3*time.Minute, "3 web replicas ready", func() (bool, string) {
			pods, err := c.pods("default", "app=web")
			if err != nil {
				return false, err.Error()
			}
			web = pods
			var desc []string
			ready := 0
			for _, p := range pods {
				desc = append(desc, p.String())
				if p.ready() {
					ready++
				}
			}
			return len(pods) == 3 && ready == 3, strings.Join(desc, "\n")
		})
		ips, nodes := map[string]bool{}, map[string]bool{}
		for i, p := range web {
			ips[p.Status.PodIP] = true
			nodes[p.Spec.NodeName] = true
			if p.Spec.NodeName == w1 && webA == nil {
				webA = &web[i]
			}
		}
		if len(ips) != 3 || !nodes[w1] || !nodes[w2] || nodes[c.control] {
			t.Fatalf("replicas not spread over both workers with their own IPs: nodes %v, ips %v", nodes, ips)
		}
		c.mustKubectl(t, "", "label", "pod", webA.Metadata.Name, "side=a")
		for _, n := range []string{"client", "hostport", "logger", "attachee", "crasher"} {
			c.waitPod(t, n, 2*time.Minute, "Running", func(p *pod) bool { return p.Status.Phase == "Running" && p.ready() })
		}

		// From the client on w2: the replica on w1 by pod IP, by its own
		// Service's DNS name, and the Service of all replicas. (timeout, not
		// wget -T: Debian's busybox 1.35 wget crashes with -T.)
		for _, url := range []string{
			"http://" + webA.Status.PodIP + ":8080/",
			"http://web-a.default.svc.cluster.local/",
			"http://web/",
		} {
			var got string
			waitFor(t, time.Minute, "client on "+w2+" gets "+url, func() (bool, string) {
				out, err := c.kubectl("", "exec", "client", "--", "timeout", "5", "wget", "-q", "-O", "-", url)
				got = strings.TrimSpace(out)
				return err == nil, out
			})
			if strings.Contains(url, ":8080") || strings.Contains(url, "web-a") {
				if got != webA.Metadata.Name {
					t.Errorf("%s answered %q, want the replica %s on %s", url, got, webA.Metadata.Name, w1)
				}
			}
		}
		hostURL := "http://" + nodeIP(t, w1) + ":18080/"
		waitFor(t, time.Minute, "host port "+hostURL, func() (bool, string) {
			body, err := httpGet(hostURL)
			return err == nil && strings.TrimSpace(body) == "hostport-ok", fmt.Sprint(body, err)
		})
	})
	if webA == nil {
		t.FailNow()
	}

	t.Run("kubectl logs -f, exec -it, port-forward, cp, attach, debug", func(t *testing.T) {
		checkLogsFollow(t, c)
		checkExecTTY(t, c, webA.Metadata.Name)
		checkPortForward(t, c, webA.Metadata.Name)
		checkCopy(t, c)
		checkAttach(t, c)
		checkDebug(t, c, webA.Metadata.Name)
	})

	// On w1 and the control plane while w2's kubelet counts down to its
	// next image collection, which comes 5 minutes after its restart.
	t.Run("control plane paused for 60s", func(t *testing.T) {
		checkPausedControlPlane(t, c, w1)
	})

	t.Run("berth SIGKILLed in a worker", func(t *testing.T) {
		checkBerthKilled(t, c, w1)
	})

	t.Run("image GC removes an unused image, never a preloaded one", func(t *testing.T) {
		gc.check(t)
	})

	t.Run("Kubernetes Conformance subset (e2e.test)", func(t *testing.T) {
		checkConformanceSubset(t, c)
	})

	t.Run("docker restart of a worker", func(t *testing.T) {
		checkNodeRestart(t, c, w2)
	})

	t.Run("node memory", func(t *testing.T) {
		out, err := run(time.Minute, "", "docker", append([]string{"stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}"}, c.nodes()...)...)
		if err != nil {
			t.Fatalf("docker stats: %v\n%s", err, out)
		}
		t.Logf("node containers' memory:\n%s", out)
	})

	t.Run("kind delete cluster leaves nothing", func(t *testing.T) {
		c.delete()
		deleted = true
		if !hadKindNetwork {
			if out, err := run(time.Minute, "", "docker", "network", "rm", "kind"); err != nil {
				t.Errorf("docker network rm kind: %v\n%s", err, out)
			}
		}
		checkHostLike(t, before)
	})
}

func checkLogsFollow(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc, _, wait := c.startKubectl(t, ctx, false, "logs", "-f", "--tail=1", "logger")
	defer func() { cancel(); wait() }()
	var seen []int
	for len(seen) < 10 && sc.Scan() {
		var n int
		if _, err := fmt.Sscanf(sc.Text(), "line-%d", &n); err == nil {
			seen = append(seen, n)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("kubectl logs -f: %d lines in 30s: %v", len(seen), seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] != seen[i-1]+1 {
			t.Errorf("kubectl logs -f: line %d followed by %d", seen[i-1], seen[i])
		}
	}
}

// checkExecTTY runs `kubectl exec -it` under script(1), which gives it
// the terminal a user would have.
func checkExecTTY(t *testing.T, c *cluster, web string) {
	cmdline := fmt.Sprintf("%s --kubeconfig %s exec -it %s -- sh -c 'tty; stty size; exit 3'", c.kubectlBin, c.kubeconfig, web)
	out, err := run(time.Minute, "", "script", "-qec", cmdline, "/dev/null")
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Errorf("kubectl exec -it: want exit code 3, got %v\n%s", err, out)
	}
	if !strings.Contains(out, "/dev/pts/") {
		t.Errorf("kubectl exec -it: no terminal in the container:\n%s", out)
	}
	out, err = c.kubectl("hello\n", "exec", "-i", "client", "--", "sh", "-c", "read x; echo got-$x")
	if err != nil || strings.TrimSpace(out) != "got-hello" {
		t.Errorf("kubectl exec -i: %v %q", err, out)
	}
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)

func checkPortForward(t *testing.T, c *cluster, web string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc, _, wait := c.startKubectl(t, ctx, false, "port-forward", "pod/"+web, "0:8080")
	defer func() { cancel(); wait() }()
	port := ""
	for port == "" && sc.Scan() {
		if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
			port = m[1]
		}
	}
	if port == "" {
		t.Fatal("kubectl port-forward printed no local port")
	}
	for i := range 2 {
		body, err := httpGet("http://127.0.0.1:" + port + "/")
		if err != nil || strings.TrimSpace(body) != web {
			t.Errorf("port-forward request %d: %v %q", i, err, body)
		}
	}
}

func checkCopy(t *testing.T, c *cluster) {
	dir := t.TempDir()
	content := "copied-" + randomSuffix() + "\n"
	src := filepath.Join(dir, "src")
	writeFile(t, src, content)
	c.mustKubectl(t, "", "cp", src, "default/client:/tmp/copied")
	if out := c.mustKubectl(t, "", "exec", "client", "--", "cat", "/tmp/copied"); out != content {
		t.Errorf("kubectl cp to the pod: %q, want %q", out, content)
	}
	back := filepath.Join(dir, "back")
	c.mustKubectl(t, "", "cp", "default/client:/tmp/copied", back)
	if b, err := os.ReadFile(back); err != nil || string(b) != content {
		t.Errorf("kubectl cp from the pod: %q %v, want %q", b, err, content)
	}
}

func checkAttach(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc, in, wait := c.startKubectl(t, ctx, true, "attach", "-i", "attachee")
	defer func() { cancel(); wait() }()
	word := "w" + randomSuffix()
	// Lines sent before the attach is set up are lost: keep sending.
	go func() {
		for ctx.Err() == nil {
			fmt.Fprintln(in, word)
			time.Sleep(time.Second)
		}
	}()
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "got:"+word {
			return
		}
	}
	t.Errorf("kubectl attach: never saw got:%s", word)
}

func checkDebug(t *testing.T, c *cluster, web string) {
	c.mustKubectl(t, "", "debug", web, "--image="+busybox, "--image-pull-policy=Never", "--container=dbg",
		"--target=server", "--", "sleep", "3600")
	c.waitPod(t, web, 2*time.Minute, "ephemeral container dbg running", func(p *pod) bool {
		for _, s := range p.Status.EphemeralStatuses {
			if s.Name == "dbg" && strings.Contains(string(s.State), "running") {
				return true
			}
		}
		return false
	})
	// --target shares the server's process namespace: httpd is visible.
	out := c.mustKubectl(t, "", "exec", web, "-c", "dbg", "--", "ps")
	if !strings.Contains(out, "httpd") {
		t.Errorf("debug container does not see the target's processes:\n%s", out)
	}
}

// imageGC checks the kubelet's image GC on one worker: its config is set
// to collect images (thresholds of 1%/0%, a minimum age of 1s) and the kubelet
// restarted, an image nothing uses is loaded into that worker only, and
// the next collection must remove it and none of the preloaded (pinned)
// images. The kubelet's config is put back afterwards. (A minimum age of
// 1s, not 0: the kubelet makes 0 its default, 2m.)
type imageGC struct {
	c         *cluster
	node      string
	restarted time.Time
	preloaded string
	restored  bool
}

const kubeletConfig = "/var/lib/kubelet/config.yaml"

func startImageGC(t *testing.T, c *cluster, node string) *imageGC {
	g := &imageGC{c: c, node: node}
	g.preloaded = g.preloadedImages(t)
	g.load(t)
	c.mustOnNode(t, node, "cp "+kubeletConfig+" "+kubeletConfig+".orig && grep -v -e '^imageGC' -e '^imageMinimumGCAge' "+kubeletConfig+".orig > "+kubeletConfig+
		" && printf 'imageGCHighThresholdPercent: 1\\nimageGCLowThresholdPercent: 0\\nimageMinimumGCAge: 1s\\n' >> "+kubeletConfig+
		" && systemctl restart kubelet")
	g.restarted = time.Now()
	waitFor(t, 3*time.Minute, "nodes Ready after "+node+"'s kubelet restart", c.nodesReady)
	return g
}

func (g *imageGC) preloadedImages(t *testing.T) string {
	return g.c.mustOnNode(t, g.node, "crictl images | awk '$1 ~ /^(registry.k8s.io|ghcr.io)\\// {print $1\":\"$2}' | sort")
}

func (g *imageGC) load(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "gc"), randomSuffix()+"\n")
	writeFile(t, filepath.Join(dir, "Dockerfile"), "FROM "+busybox+"\nCOPY gc /gc\n")
	dockerOK(t, "build", "-t", "berth.test/gcme:v1", dir)
	kindOK(t, g.c, "load", "docker-image", "berth.test/gcme:v1", "--nodes", g.node)
	if !strings.Contains(g.c.mustOnNode(t, g.node, "crictl images"), "berth.test/gcme") {
		t.Fatal("gcme not loaded")
	}
}

func (g *imageGC) check(t *testing.T) {
	// The collection after the one at the kubelet's start, with a margin.
	timeout := time.Until(g.restarted.Add(7 * time.Minute))
	if timeout < time.Minute {
		timeout = time.Minute
	}
	waitFor(t, timeout, "the kubelet's image GC removes berth.test/gcme on "+g.node, func() (bool, string) {
		out, err := g.c.onNode(g.node, "crictl images")
		return err == nil && !strings.Contains(out, "berth.test/gcme"), out
	})
	if after := g.preloadedImages(t); after != g.preloaded || strings.Count(g.preloaded, "\n") < 8 {
		t.Errorf("preloaded images changed by GC:\nbefore:\n%s\nafter:\n%s", g.preloaded, after)
	}
	g.restore(t)
}

func (g *imageGC) restore(t *testing.T) {
	if g.restored {
		return
	}
	g.restored = true
	g.c.mustOnNode(t, g.node, "mv "+kubeletConfig+".orig "+kubeletConfig+" && systemctl restart kubelet")
	waitFor(t, 3*time.Minute, "nodes Ready after the kubelet's config is back", g.c.nodesReady)
}

// checkPausedControlPlane freezes the control plane node for 60s: the
// worker's pods keep serving, and a container that crashes meanwhile is
// restarted by its kubelet, with no API server to ask.
func checkPausedControlPlane(t *testing.T, c *cluster, node string) {
	hostURL := "http://" + nodeIP(t, node) + ":18080/"
	crasherAttempt := func() string {
		out, _ := c.onNode(node, "crictl ps --name crasher --state running -o go-template --template '{{range .containers}}{{.metadata.attempt}}{{end}}'")
		return strings.TrimSpace(out)
	}
	before := crasherAttempt()
	dockerOK(t, "pause", c.control)
	paused := true
	unpause := func() {
		if paused {
			dockerOK(t, "unpause", c.control)
			paused = false
		}
	}
	defer unpause()
	start := time.Now()
	c.mustOnNode(t, node, "crictl exec $(crictl ps -q --name crasher --state running) touch /tmp/crash")
	restarted := false
	for time.Since(start) < 60*time.Second {
		if body, err := httpGet(hostURL); err != nil || strings.TrimSpace(body) != "hostport-ok" {
			t.Errorf("%.0fs into the pause: %s: %v %q", time.Since(start).Seconds(), hostURL, err, body)
		}
		if a := crasherAttempt(); a != "" && a != before {
			restarted = true
		}
		time.Sleep(3 * time.Second)
	}
	if !restarted {
		t.Errorf("the crashed container was not restarted while the control plane was paused (attempt %s)", before)
	}
	unpause()
	waitFor(t, 3*time.Minute, "nodes Ready after unpause", c.nodesReady)
	c.waitPod(t, "crasher", 2*time.Minute, "restarted and running", func(p *pod) bool {
		return p.Status.Phase == "Running" && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
	})
	waitFor(t, 2*time.Minute, "web deployment available", func() (bool, string) {
		out, err := c.kubectl("", "get", "deploy", "web", "-o", "jsonpath={.status.availableReplicas}")
		return err == nil && out == "3", out
	})
}

// checkBerthKilled SIGKILLs berth in a node: the pods keep serving and
// logging, and once systemd has restarted berth the kubelet sees the same
// sandboxes and containers: nothing recreated.
func checkBerthKilled(t *testing.T, c *cluster, node string) {
	ids := func() string {
		return c.mustOnNode(t, node, "crictl pods -q | sort; crictl ps -a -q | sort")
	}
	logLine := func() int {
		out := c.mustOnNode(t, node, "tail -n 1 $(ls -d /var/log/pods/default_logger_*/logger/*.log | sort | tail -1)")
		var n int
		if i := strings.Index(out, "line-"); i >= 0 {
			fmt.Sscanf(out[i:], "line-%d", &n)
		}
		return n
	}
	restarts := func() string {
		return c.mustKubectl(t, "", "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.containerStatuses[*].restartCount}{" "}{end}`,
			"--field-selector", "spec.nodeName="+node)
	}
	beforeIDs, beforeRestarts := ids(), restarts()
	pid := strings.TrimSpace(c.mustOnNode(t, node, "systemctl show -p MainPID --value berth"))
	line := logLine()
	c.mustOnNode(t, node, "kill -9 "+pid)
	hostURL := "http://" + nodeIP(t, node) + ":18080/"
	if body, err := httpGet(hostURL); err != nil || strings.TrimSpace(body) != "hostport-ok" {
		t.Errorf("right after berth's SIGKILL: %s: %v %q", hostURL, err, body)
	}
	waitFor(t, time.Minute, "systemd restarts berth", func() (bool, string) {
		out, err := c.onNode(node, "p=$(systemctl show -p MainPID --value berth); [ \"$p\" != 0 ] && [ \"$p\" != "+pid+" ] && crictl info >/dev/null && echo $p")
		return err == nil && strings.TrimSpace(out) != "", out
	})
	if l := logLine(); l <= line {
		t.Errorf("logger wrote nothing across berth's restart (line %d, then %d)", line, l)
	}
	time.Sleep(20 * time.Second) // a few kubelet sync loops
	if got := ids(); got != beforeIDs {
		t.Errorf("sandboxes or containers changed across berth's restart:\nbefore:\n%s\nafter:\n%s", beforeIDs, got)
	}
	if got := restarts(); got != beforeRestarts {
		t.Errorf("restart counts changed across berth's restart: %s, then %s", beforeRestarts, got)
	}
	if body, err := httpGet(hostURL); err != nil || strings.TrimSpace(body) != "hostport-ok" {
		t.Errorf("after berth's restart: %s: %v %q", hostURL, err, body)
	}
}

// checkNodeRestart restarts a worker's container: it comes back Ready and
// its pods run again (new sandboxes: the node's /run is gone).
func checkNodeRestart(t *testing.T, c *cluster, node string) {
	restarts := func(p pod) int {
		n := 0
		for _, s := range p.Status.ContainerStatuses {
			n += s.RestartCount
		}
		return n
	}
	before := map[string]int{}
	pods, err := c.pods("default", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.NodeName == node && p.Status.Phase == "Running" {
			before[p.Metadata.Name] = restarts(p)
		}
	}
	if len(before) == 0 {
		t.Fatalf("no running pod on %s", node)
	}
	dockerOK(t, "restart", node)
	// Every container ran again in a new sandbox (the node's /run is
	// new): each pod's restart count grew, and it is ready.
	waitFor(t, 5*time.Minute, "pods on "+node+" restarted and ready", func() (bool, string) {
		pods, err := c.pods("default", "")
		if err != nil {
			return false, err.Error()
		}
		var bad []string
		for _, p := range pods {
			if n, ok := before[p.Metadata.Name]; ok && !(p.Status.Phase == "Running" && p.ready() && restarts(p) > n) {
				bad = append(bad, p.String())
			}
		}
		return len(bad) == 0, strings.Join(bad, "\n")
	})
	waitFor(t, 5*time.Minute, node+" Ready after docker restart", c.nodesReady)
	waitFor(t, 2*time.Minute, "the client on "+node+" reaches the web Service again", func() (bool, string) {
		out, err := c.kubectl("", "exec", "client", "--", "timeout", "5", "wget", "-q", "-O", "-", "http://web/")
		return err == nil, out
	})
}

func dockerOK(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(5*time.Minute, "", "docker", args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kindOK(t *testing.T, c *cluster, args ...string) {
	t.Helper()
	start := time.Now()
	out, err := run(5*time.Minute, "", c.kind, append(args, "--name", c.name)...)
	if err != nil {
		t.Fatalf("kind %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("kind %s: %.1fs", strings.Join(args, " "), time.Since(start).Seconds())
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
