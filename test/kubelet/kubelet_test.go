package kubelet_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
	"github.com/berth-runtime/berth/test/kubehost"
)

// Set by hack/env.sh (hack/kubelet builds into them).
const (
	envKubeletDir = "BERTH_KUBELET_DIR" // kubelet, kube-apiserver, kubectl
	envEtcd       = "BERTH_ETCD"
)

// kubeBinary returns $BERTH_KUBELET_DIR/name, or skips the test.
func kubeBinary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv(envKubeletDir)
	if dir == "" {
		t.Skipf("needs the Kubernetes binaries: $%s is unset (hack/kubelet builds them; hack/test sets it)", envKubeletDir)
	}
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		t.Skipf("needs %s: not built in $%s=%s (run hack/kubelet)", name, envKubeletDir, dir)
	}
	return p
}

func etcdBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv(envEtcd)
	if p == "" {
		t.Skipf("needs etcd: $%s is unset (hack/kubelet builds it; hack/test sets it)", envEtcd)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("needs etcd: %v (run hack/kubelet)", err)
	}
	return p
}

// env is one test's berth, on a default network of its own, and the host
// guard around it.
type env struct {
	t        *testing.T
	reg      string
	d        *framework.Daemon
	bridge   string
	subnet   *net.IPNet
	cgroup   string // the kubelet's cgroupRoot
	nodeName string
	// nodeIP is the kubelet's node IP and server address: the kubelet
	// refuses a loopback node IP, so it is on an interface of the test's
	// own (an empty bridge), which keeps the API server's connections to
	// the kubelet on this machine.
	nodeIP string
}

// newEnv takes the machine's kubelet turn, records the host, and starts
// berth with registry mirrors for docker.io and registry.k8s.io and
// --default-network on a bridge and subnet of its own; config is more of
// berth's config, top-level keys.
func newEnv(t *testing.T, config ...string) *env {
	t.Helper()
	framework.RequireRoot(t)
	reg := framework.TestRegistry(t)
	kubeBinary(t, "kubelet")
	takeTurn(t)
	id := framework.RandHex(3)
	e := &env{
		t:        t,
		reg:      reg,
		bridge:   "bk" + id,
		subnet:   cnitest.FreeSubnet(t),
		cgroup:   "/berth-kubelet-" + id,
		nodeName: "berth-node-" + id,
	}
	guardHost(t, e.cgroup)
	e.nodeIP = makeNodeIP(t, "bn"+id, e.subnet)
	// Runs after berth's own cleanup (registered later) has removed the pods.
	t.Cleanup(func() {
		cnitest.DeleteLink(e.bridge)
		prefix := strings.TrimSuffix(e.subnet.IP.String(), "0")
		rules, err := kubehost.DeleteNATRulesNaming(prefix)
		if err != nil {
			t.Error(err)
		}
		for _, r := range rules {
			t.Errorf("iptables rule naming the pod subnet left (deleted): %s", r)
		}
	})
	cfg := strings.Join(config, "") + fmt.Sprintf(`[cni]
default_network = true
default_bridge = %q
default_subnet = %q
`, e.bridge, e.subnet)
	for _, host := range []string{"docker.io", "registry.k8s.io"} {
		cfg += fmt.Sprintf("[registries.%q]\nmirrors = [\"http://%s\"]\n", host, reg)
	}
	e.d = framework.StartDaemon(t, framework.WithConfig(cfg), framework.WithArgs("--cni-bin-dir", cnitest.PluginDir(t)))
	makeCgroupRoot(t, e.cgroup)
	return e
}

// makeNodeIP creates an interface (an empty bridge) named link with the
// first address of a free /24 other than avoid, removed when the test ends.
func makeNodeIP(t *testing.T, link string, avoid *net.IPNet) string {
	t.Helper()
	subnet := cnitest.FreeSubnet(t)
	for subnet.String() == avoid.String() {
		subnet = cnitest.FreeSubnet(t)
	}
	ip := subnet.IP.To4()
	ip[3] = 1
	t.Cleanup(func() { cnitest.DeleteLink(link) })
	for _, args := range [][]string{
		{"link", "add", link, "type", "bridge"}, // no dummy module on the reference machine
		{"addr", "add", ip.String() + "/32", "dev", link},
		{"link", "set", link, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return ip.String()
}

// leases lists the IPs the default network's host-local holds.
func (e *env) leases() []string {
	entries, _ := os.ReadDir(filepath.Join(e.d.State, "cni", "networks", "berth"))
	var ips []string
	for _, en := range entries {
		if net.ParseIP(en.Name()) != nil {
			ips = append(ips, en.Name())
		}
	}
	return ips
}

// podSandboxes lists berth's sandboxes of the pod with this Kubernetes uid.
func (e *env) podSandboxes(t *testing.T, uid string) []*runtimeapi.PodSandbox {
	t.Helper()
	resp, err := e.d.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}},
	})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	return resp.Items
}

// podContainers lists berth's containers of the pod with this uid.
func (e *env) podContainers(t *testing.T, uid string) []*runtimeapi.Container {
	t.Helper()
	resp, err := e.d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}},
	})
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	return resp.Containers
}

// exec runs cmd in a container through berth (not the kubelet).
func (e *env) exec(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	resp, err := e.d.Runtime.ExecSync(framework.Ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 10})
	if err != nil || resp.ExitCode != 0 {
		t.Fatalf("exec %v in %s: %v, exit %d, %s%s", cmd, id, err, resp.GetExitCode(), resp.GetStdout(), resp.GetStderr())
	}
	return string(resp.Stdout)
}

// proc is a process the test started (kubelet, etcd, kube-apiserver,
// kubectl port-forward), killed if the test binary dies.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func startProc(t *testing.T, name, logPath string, argv ...string) *proc {
	t.Helper()
	return startProcEnv(t, name, logPath, nil, argv...)
}

// startProcEnv is startProc with env as the process's environment (nil: the test's).
func startProcEnv(t *testing.T, name, logPath string, env []string, argv ...string) *proc {
	t.Helper()
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			p.dumpLog(t, 150)
		}
	})
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, then SIGKILL after 20s.
func (p *proc) stop(t *testing.T) {
	if !p.running() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Logf("%s did not stop in 20s: SIGKILL", p.name)
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) dumpLog(t *testing.T, lines int) {
	b, _ := os.ReadFile(p.log)
	all := strings.Split(string(b), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	t.Logf("last %d lines of %s's log (%s):\n%s", lines, p.name, p.log, strings.Join(all, "\n"))
}

// kubelet is a stock kubelet started against the env's berth.
type kubelet struct {
	*proc
	e         *env
	dir       string
	rootDir   string
	manifests string
	podLogs   string
	port      int
	healthz   int
	args      []string
	starts    int
	client    *http.Client
	host      kubehost.Standalone
}

type kubeletOptions struct {
	kubeconfig string
	// tracing is an OTLP gRPC endpoint the kubelet exports every trace
	// to (KubeletTracing, on by default since v1.27).
	tracing string
}

// startKubelet writes a KubeletConfiguration and runs the kubelet with it:
// berth's socket, cgroupfs under the env's cgroupRoot, static pods from a
// directory polled every second, small log files (rotation), its server on
// the node IP with anonymous access (this test reads /pods from it).
func (e *env) startKubelet(o kubeletOptions) *kubelet {
	t := e.t
	t.Helper()
	bin := kubeBinary(t, "kubelet")
	k := &kubelet{e: e, dir: framework.TempDir(t)}
	k.rootDir = filepath.Join(k.dir, "root")
	k.manifests = filepath.Join(k.dir, "manifests")
	k.podLogs = filepath.Join(k.dir, "pods")
	for _, d := range []string{k.rootDir, k.manifests, k.podLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	k.port = freePort(t)
	k.healthz = freePort(t)
	k.host = kubehost.Standalone{
		Endpoint:        "unix://" + e.d.Socket,
		CgroupRoot:      e.cgroup,
		StaticPodPath:   k.manifests,
		Address:         e.nodeIP,
		Port:            k.port,
		HealthzPort:     k.healthz,
		PodLogsDir:      k.podLogs,
		VolumePluginDir: filepath.Join(k.dir, "volume-plugins"),
	}
	cfg := k.host.Config()
	cfg["syncFrequency"] = "10s"
	// Rotation within seconds: the logger container writes ~3 kB/s.
	cfg["containerLogMaxSize"] = "4Ki"
	cfg["containerLogMaxFiles"] = 3
	cfg["containerLogMonitorInterval"] = "3s"
	if o.tracing != "" {
		cfg["tracing"] = map[string]any{"endpoint": o.tracing, "samplingRatePerMillion": 1000000}
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	cfgPath := filepath.Join(k.dir, "config.json")
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{bin,
		"--config", cfgPath,
		"--root-dir", k.rootDir,
		"--cert-dir", filepath.Join(k.dir, "pki"),
		"--hostname-override", e.nodeName,
		"--node-ip", e.nodeIP,
		"--v", "2",
	}
	if o.kubeconfig != "" {
		args = append(args, "--kubeconfig", o.kubeconfig)
	}
	k.args = args
	k.client = &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	k.start(t)
	return k
}

// start runs the kubelet with its configuration (again, after a stop: its
// root dir, and so what it knows of its pods, is kept) and waits until its
// healthz answers and /pods serves.
func (k *kubelet) start(t *testing.T) {
	t.Helper()
	k.starts++
	k.proc = startProc(t, "kubelet", filepath.Join(k.dir, fmt.Sprintf("kubelet-%d.log", k.starts)), k.args...)
	waitFor(t, 2*time.Minute, "the kubelet to serve", func() (bool, string) {
		if !k.running() {
			k.dumpLog(t, 60)
			t.Fatalf("the kubelet exited during start-up")
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", k.healthz))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return false, fmt.Sprintf("healthz %d: %s", resp.StatusCode, b)
		}
		if _, err := k.get("/pods"); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func freePort(t *testing.T) int {
	_, port, _ := net.SplitHostPort(framework.FreeTCPAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

func (k *kubelet) get(path string) ([]byte, error) {
	return k.host.Get(k.client, path)
}

// pod is the part of a v1.Pod the tests read (the kubelet's /pods, kubectl -o json).
type pod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		InitContainerStatuses []containerStatus `json:"initContainerStatuses"`
		ContainerStatuses     []containerStatus `json:"containerStatuses"`
	} `json:"status"`
}

type containerStatus struct {
	Name         string         `json:"name"`
	Ready        bool           `json:"ready"`
	RestartCount int            `json:"restartCount"`
	ContainerID  string         `json:"containerID"`
	State        containerState `json:"state"`
	LastState    containerState `json:"lastState"`
}

type containerState struct {
	Waiting *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"waiting"`
	Running *struct {
		StartedAt time.Time `json:"startedAt"`
	} `json:"running"`
	Terminated *struct {
		ExitCode   int       `json:"exitCode"`
		Reason     string    `json:"reason"`
		StartedAt  time.Time `json:"startedAt"`
		FinishedAt time.Time `json:"finishedAt"`
	} `json:"terminated"`
}

func (s containerState) String() string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%s, exit %d)", s.Terminated.Reason, s.Terminated.ExitCode)
	case s.Waiting != nil:
		return fmt.Sprintf("waiting(%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	}
	return "none"
}

func (p *pod) container(name string) *containerStatus {
	for _, l := range [][]containerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range l {
			if l[i].Name == name {
				return &l[i]
			}
		}
	}
	return nil
}

func (p *pod) condition(typ string) string {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func (p *pod) String() string {
	s := fmt.Sprintf("%s phase=%s ip=%s ready=%s", p.Metadata.Name, p.Status.Phase, p.Status.PodIP, p.condition("Ready"))
	for _, l := range [][]containerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, c := range l {
			s += fmt.Sprintf(" [%s ready=%v restarts=%d %s last=%s]", c.Name, c.Ready, c.RestartCount, c.State, c.LastState)
		}
	}
	return s
}

// pods returns the kubelet's pods (with the status of static pods).
func (k *kubelet) pods() (map[string]*pod, error) {
	items, err := kubehost.Pods[*pod](k.host, k.client)
	if err != nil {
		return nil, err
	}
	m := map[string]*pod{}
	for _, p := range items {
		m[p.Metadata.Name] = p
	}
	return m, nil
}

// waitPod polls the kubelet's /pods until cond holds for the pod named
// name (the static pod's name is <manifest name>-<node name>).
func (k *kubelet) waitPod(t *testing.T, name string, timeout time.Duration, what string, cond func(*pod) bool) *pod {
	t.Helper()
	var got *pod
	waitFor(t, timeout, name+": "+what, func() (bool, string) {
		if !k.running() {
			t.Fatalf("the kubelet exited")
		}
		pods, err := k.pods()
		if err != nil {
			return false, err.Error()
		}
		p := pods[name]
		if p == nil {
			return false, "no such pod"
		}
		got = p
		return cond(p), p.String()
	})
	return got
}

// writeManifest writes a static pod manifest atomically (the kubelet polls
// the directory and must never read half a file).
func (k *kubelet) writeManifest(name, yaml string) string {
	k.e.t.Helper()
	p := filepath.Join(k.manifests, name+".yaml")
	tmp := filepath.Join(k.dir, name+".yaml.tmp")
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		k.e.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		k.e.t.Fatal(err)
	}
	return p
}

// waitFor polls cond every 500ms until it holds, failing the test with
// cond's last description after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	var last string
	for {
		ok, desc := cond()
		if ok {
			t.Logf("%s: after %.1fs", what, time.Since(start).Seconds())
			return
		}
		if desc != last && desc != "" {
			last = desc
		}
		if time.Since(start) > timeout {
			t.Fatalf("waited %s for %s; last: %s", timeout, what, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// httpGet fetches url with a short timeout and returns the body.
func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// runExec runs cmd to completion (60s at most) and returns its combined
// output.
func runExec(cmd *exec.Cmd) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("%s: still running after 60s", cmd.Args)
	}
}

// infoPid is the pid in a verbose status's "info" document, 0 if it has
// none.
func infoPid(info map[string]string) int {
	var v struct {
		Pid int `json:"pid"`
	}
	json.Unmarshal([]byte(info["info"]), &v)
	return v.Pid
}

// checkBerthKill SIGKILLs berth while the web pod (uid, serving on podIP)
// runs, checks that its containers keep running and serving, restarts
// berth, and checks that the kubelet still sees the same pod: the same
// sandbox, the same containers with the same restart counts, ready.
// readyPod waits until the kubelet (or the API) reports the pod ready.
func checkBerthKill(t *testing.T, e *env, uid, podIP string, readyPod func(t *testing.T, what string) *pod) {
	t.Helper()
	before := readyPod(t, "ready")
	sbs := e.podSandboxes(t, uid)
	if len(sbs) != 1 {
		t.Fatalf("sandboxes before: %v", sbs)
	}
	sandbox := sbs[0].Id
	var pids []int
	ids := map[string]bool{}
	for _, c := range e.podContainers(t, uid) {
		ids[c.Id] = true
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		st, err := e.d.Runtime.ContainerStatus(framework.Ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: c.Id, Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, infoPid(st.Info))
	}
	if len(pids) != 2 {
		t.Fatalf("running containers' pids: %v", pids)
	}
	e.d.Kill()
	for _, pid := range pids {
		if syscall.Kill(pid, 0) != nil {
			t.Errorf("container process %d died with berth", pid)
		}
	}
	url := "http://" + net.JoinHostPort(podIP, "8080") + "/index.html"
	if _, err := httpGet(url); err != nil {
		t.Errorf("the pod stopped serving with berth down: %v", err)
	}
	// Long enough for the kubelet's relists (every second) to fail.
	time.Sleep(5 * time.Second)
	e.d.Restart()
	// Several relists, probe periods and a full sync (syncFrequency 10s).
	time.Sleep(20 * time.Second)
	after := readyPod(t, "ready after berth's restart")
	for _, name := range []string{"server", "logger"} {
		b, a := before.container(name), after.container(name)
		if a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount {
			t.Errorf("%s: %s restarts %d before berth's restart, %s restarts %d after", name, b.ContainerID, b.RestartCount, a.ContainerID, a.RestartCount)
		}
	}
	sbs = e.podSandboxes(t, uid)
	if len(sbs) != 1 || sbs[0].Id != sandbox || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandboxes after berth's restart: %v, want only %s, ready", sbs, sandbox)
	}
	for _, c := range e.podContainers(t, uid) {
		if !ids[c.Id] {
			t.Errorf("new container after berth's restart: %v", c)
		}
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) != nil {
			t.Errorf("container process %d is gone", pid)
		}
	}
	if _, err := httpGet(url); err != nil {
		t.Errorf("after berth's restart: %v", err)
	}
}
