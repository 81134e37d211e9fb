package kubelet_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
	"github.com/berth-runtime/berth/test/kubehost"
)

// cluster is etcd and kube-apiserver on 127.0.0.1, and kubectl set up to
// talk to them.
type cluster struct {
	t          *testing.T
	dir        string
	server     string // https://127.0.0.1:port
	kubeconfig string
	kubectlBin string
	env        []string
}

const adminToken = "berth-test-admin-token"

// startCluster runs etcd and kube-apiserver (static token for an admin in
// system:masters, AlwaysAllow, service-account keys made here, no endpoint
// reconciler as it advertises 127.0.0.1) and waits until the API server is
// ready. There is no scheduler and no controller manager: pods name their
// node, and the test creates the default service account itself.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	apiserver, kubectl, etcd := kubeBinary(t, "kube-apiserver"), kubeBinary(t, "kubectl"), etcdBinary(t)
	c := &cluster{t: t, dir: framework.TempDir(t), kubectlBin: kubectl}

	client, peer, secure := freePort(t), freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	startProc(t, "etcd", filepath.Join(c.dir, "etcd.log"), etcd,
		"--name", "berth-test",
		"--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "berth-test="+peerURL,
		"--unsafe-no-fsync", "--log-level", "warn")

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := x509.MarshalECPrivateKey(key)
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	saKey, saPub, tokens := filepath.Join(c.dir, "sa.key"), filepath.Join(c.dir, "sa.pub"), filepath.Join(c.dir, "tokens.csv")
	writeFile(t, saKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: priv}))
	writeFile(t, saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	writeFile(t, tokens, []byte(adminToken+`,admin,admin,"system:masters"`+"\n"))

	c.server = fmt.Sprintf("https://127.0.0.1:%d", secure)
	api := startProc(t, "kube-apiserver", filepath.Join(c.dir, "apiserver.log"), apiserver,
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		fmt.Sprintf("--secure-port=%d", secure),
		"--cert-dir", filepath.Join(c.dir, "apiserver-pki"),
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saPub,
		"--service-account-signing-key-file", saKey,
		"--token-auth-file", tokens,
		"--authorization-mode", "AlwaysAllow",
		"--endpoint-reconciler-type", "none",
		// The node's name resolves nowhere: reach the kubelet at its node IP.
		"--kubelet-preferred-address-types", "InternalIP",
		"--enable-priority-and-fairness=false",
		"--v", "1")

	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	writeFile(t, c.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
`, c.server, adminToken)))
	// kubectl keeps a discovery cache under $HOME: a home of its own.
	home := filepath.Join(c.dir, "home")
	os.MkdirAll(home, 0o755)
	c.env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+c.kubeconfig)

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	waitFor(t, 3*time.Minute, "kube-apiserver ready", func() (bool, string) {
		if !api.running() {
			api.dumpLog(t, 60)
			t.Fatal("kube-apiserver exited")
		}
		req, _ := http.NewRequest("GET", c.server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Sprintf("%s: %s", resp.Status, b)
	})
	return c
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// kubectl runs kubectl to completion; stdin, when not empty, is its input.
func (c *cluster) kubectl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(c.kubectlBin, args...)
	cmd.Env = c.env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := runExec(cmd)
	return out, err
}

func (c *cluster) mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := c.kubectl(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
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

// The cluster's pods: the web pod without the readiness toggle (it serves
// /index.html from the start), the crashing and the OOM pod, all bound to
// the node by name (there is no scheduler) and without a service account
// token (there is no controller to publish the root CA).
func clusterPods(node string) string {
	fix := func(manifest string) string {
		m := strings.Replace(manifest, "spec:\n", fmt.Sprintf("spec:\n  nodeName: %s\n  automountServiceAccountToken: false\n", node), 1)
		m = strings.Replace(m, "path: /ready.html", "path: /index.html", 1)
		return strings.Replace(m, "  namespace: default\n", "", 1)
	}
	return fix(webPod) + "---\n" + fix(crashPod) + "---\n" + fix(oomPod)
}

func TestCluster(t *testing.T) {
	kubeBinary(t, "kube-apiserver")
	kubeBinary(t, "kubectl")
	etcdBinary(t)
	e := newEnv(t)
	c := startCluster(t)
	k := e.startKubelet(kubeletOptions{kubeconfig: c.kubeconfig})

	waitFor(t, 2*time.Minute, "node "+e.nodeName+" registered and Ready", func() (bool, string) {
		if !k.running() {
			t.Fatal("the kubelet exited")
		}
		out, err := c.kubectl("", "get", "node", e.nodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.containerRuntimeVersion}`)
		if err != nil {
			return false, out
		}
		return strings.HasPrefix(out, "True "), out
	})
	runtimeVersion := c.mustKubectl(t, "", "get", "node", e.nodeName, "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}")
	if !strings.HasPrefix(runtimeVersion, "berth://") {
		t.Errorf("node's container runtime: %q", runtimeVersion)
	}
	// The ServiceAccount admission plugin wants the namespace's default
	// account, which a controller manager would make.
	if out, err := c.kubectl("", "create", "serviceaccount", "default"); err != nil && !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("create service account: %v: %s", err, out)
	}
	c.mustKubectl(t, clusterPods(e.nodeName), "apply", "-f", "-")

	web := c.waitPod(t, "web", 4*time.Minute, "Running and ready", func(p *pod) bool {
		return p.Status.Phase == "Running" && p.condition("Ready") == "True"
	})
	t.Run("pod IP", func(t *testing.T) {
		ip := net.ParseIP(web.Status.PodIP)
		if ip == nil || !e.subnet.Contains(ip) {
			t.Errorf("pod IP %s is not in the pod subnet %s", web.Status.PodIP, e.subnet)
		}
		out := c.mustKubectl(t, "", "get", "pods", "-o", "wide")
		t.Logf("kubectl get pods -o wide:\n%s", out)
		if !regexp.MustCompile(`(?m)^web\s+2/2\s+Running\s+0\s+\S+\s+` + regexp.QuoteMeta(web.Status.PodIP) + `\s+` + regexp.QuoteMeta(e.nodeName) + `\s`).MatchString(out) {
			t.Errorf("kubectl get pods -o wide does not show web running on %s with IP %s", e.nodeName, web.Status.PodIP)
		}
	})

	t.Run("exec", func(t *testing.T) {
		if out := c.mustKubectl(t, "", "exec", "web", "-c", "server", "--", "cat", "/www/index.html"); out != "berth-init-ran\n" {
			t.Errorf("kubectl exec cat: %q", out)
		}
		// stdin through, exit code back.
		if out := c.mustKubectl(t, "hello through berth\n", "exec", "-i", "web", "-c", "server", "--", "sh", "-c", "cat; echo from $(hostname)"); out != "hello through berth\nfrom web\n" {
			t.Errorf("kubectl exec -i: %q", out)
		}
		out, err := c.kubectl("", "exec", "web", "-c", "server", "--", "sh", "-c", "exit 7")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Errorf("kubectl exec exit 7: %v: %s", err, out)
		}
	})

	t.Run("port-forward", func(t *testing.T) {
		port := freePort(t)
		pf := startProcEnv(t, "kubectl port-forward", filepath.Join(c.dir, "port-forward.log"), c.env,
			c.kubectlBin, "port-forward", "--address", "127.0.0.1", "pod/web", fmt.Sprintf("%d:8080", port))
		url := fmt.Sprintf("http://127.0.0.1:%d/index.html", port)
		waitFor(t, time.Minute, "index.html through kubectl port-forward", func() (bool, string) {
			if !pf.running() {
				pf.dumpLog(t, 20)
				t.Fatal("kubectl port-forward exited")
			}
			body, err := httpGet(url)
			if err != nil {
				return false, err.Error()
			}
			return body == "berth-init-ran\n", fmt.Sprintf("%q", body)
		})
		// A second connection through the same forward.
		if body, err := httpGet(url); err != nil || body != "berth-init-ran\n" {
			t.Errorf("second request: %q, %v", body, err)
		}
		pf.stop(t)
	})

	t.Run("logs", func(t *testing.T) {
		if out := c.mustKubectl(t, "", "logs", "web", "-c", "init"); out != "init done\n" {
			t.Errorf("kubectl logs -c init: %q", out)
		}
		// The kubelet reads the current file only: right after a rotation
		// it holds fewer than 3 lines, for a moment none.
		waitFor(t, 10*time.Second, "kubectl logs -c logger --tail 3", func() (bool, string) {
			out := c.mustKubectl(t, "", "logs", "web", "-c", "logger", "--tail", "3")
			return regexp.MustCompile(`^(logline \d+ \.+\n){1,3}$`).MatchString(out), fmt.Sprintf("%q", out)
		})
	})

	ready := func(want bool) func(p *pod) bool {
		return func(p *pod) bool {
			s := p.container("server")
			return s != nil && s.Ready == want && (p.condition("Ready") == "True") == want
		}
	}
	t.Run("readiness probe", func(t *testing.T) {
		c.mustKubectl(t, "", "exec", "web", "-c", "server", "--", "mv", "/www/index.html", "/www/index.off")
		c.waitPod(t, "web", 30*time.Second, "not ready without /index.html", ready(false))
		c.mustKubectl(t, "", "exec", "web", "-c", "server", "--", "mv", "/www/index.off", "/www/index.html")
		c.waitPod(t, "web", 30*time.Second, "ready again", ready(true))
	})

	t.Run("liveness probe", func(t *testing.T) {
		c.mustKubectl(t, "", "exec", "web", "-c", "server", "--", "rm", "/www/alive")
		p := c.waitPod(t, "web", time.Minute, "server restarted by its liveness probe, ready", func(p *pod) bool {
			s := p.container("server")
			return s.RestartCount == 1 && s.State.Running != nil && ready(true)(p)
		})
		if l := p.container("logger"); l.RestartCount != 0 {
			t.Errorf("logger restarted too: %s", p)
		}
	})

	t.Run("logs after rotation", func(t *testing.T) {
		logger := filepath.Join(k.podLogs, fmt.Sprintf("default_web_%s", web.Metadata.UID), "logger")
		waitFor(t, time.Minute, "two rotations of logger's log", func() (bool, string) {
			files, _ := filepath.Glob(filepath.Join(logger, "0.log*"))
			gz := slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, ".gz") })
			return len(files) >= 3 && gz, fmt.Sprint(files)
		})
		_, last, err := checkLogLinesStable(logger)
		if err != nil {
			t.Fatal(err)
		}
		// The latest line, written after the rotations (once the current
		// file has one).
		waitFor(t, 10*time.Second, fmt.Sprintf("kubectl logs --tail 1 at line %d or later", last), func() (bool, string) {
			out := c.mustKubectl(t, "", "logs", "web", "-c", "logger", "--tail", "1")
			m := regexp.MustCompile(`^logline (\d+) \.+\n$`).FindStringSubmatch(out)
			if m == nil {
				return false, fmt.Sprintf("%q", out)
			}
			n, _ := strconv.Atoi(m[1])
			return n >= last, fmt.Sprintf("%q", out)
		})
	})

	t.Run("crash back-off", func(t *testing.T) {
		backoff := false
		p := c.waitPod(t, "crash", 3*time.Minute, "restarted twice, in CrashLoopBackOff", func(p *pod) bool {
			s := p.container("crash")
			if s != nil && s.State.Waiting != nil && s.State.Waiting.Reason == "CrashLoopBackOff" {
				backoff = true
			}
			return s != nil && s.RestartCount >= 2 && backoff
		})
		if last := p.container("crash").LastState.Terminated; last == nil || last.ExitCode != 3 {
			t.Errorf("last state: %s", p)
		}
	})

	t.Run("OOM killed", func(t *testing.T) {
		p := c.waitPod(t, "oom", 2*time.Minute, "terminated", func(p *pod) bool {
			s := p.container("oom")
			return s != nil && s.State.Terminated != nil
		})
		if s := p.container("oom").State.Terminated; s.Reason != "OOMKilled" || s.ExitCode != 137 || p.Status.Phase != "Failed" {
			t.Errorf("want OOMKilled, exit 137, phase Failed: %s", p)
		}
	})

	t.Run("berth SIGKILLed", func(t *testing.T) {
		checkBerthKill(t, e, web.Metadata.UID, web.Status.PodIP, func(t *testing.T, what string) *pod {
			return c.waitPod(t, "web", 30*time.Second, what, ready(true))
		})
	})

	t.Run("delete", func(t *testing.T) {
		uids := map[string]string{}
		for _, name := range []string{"web", "crash", "oom"} {
			p, err := c.getPod(name)
			if err != nil {
				t.Fatal(err)
			}
			uids[name] = p.Metadata.UID
		}
		c.mustKubectl(t, "", "delete", "pod", "web", "crash", "oom", "--wait", "--timeout", "2m")
		if out := c.mustKubectl(t, "", "get", "pods", "-o", "name"); out != "" {
			t.Errorf("pods left in the API: %q", out)
		}
		waitFor(t, 3*time.Minute, "every container and sandbox removed from berth", func() (bool, string) {
			var left []string
			for name, uid := range uids {
				for _, sb := range e.podSandboxes(t, uid) {
					left = append(left, fmt.Sprintf("sandbox of %s (%s)", name, sb.State))
				}
				for _, ctr := range e.podContainers(t, uid) {
					left = append(left, fmt.Sprintf("container %s of %s (%s)", ctr.Metadata.Name, name, ctr.State))
				}
			}
			return len(left) == 0, strings.Join(left, ", ")
		})
		if l := e.leases(); len(l) != 0 {
			t.Errorf("IP leases left: %v", l)
		}
		for name, uid := range uids {
			if d := slices.Concat(kubehost.CgroupDirs(e.cgroup+"/kubepods/besteffort/pod"+uid), kubehost.CgroupDirs(e.cgroup+"/kubepods/burstable/pod"+uid)); len(d) > 0 {
				t.Errorf("%s: pod cgroup left: %v", name, d)
			}
		}
	})
}
