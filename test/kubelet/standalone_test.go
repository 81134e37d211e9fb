package kubelet_test

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
	"github.com/berth-runtime/berth/test/kubehost"
)

// webPod: an init container fills an emptyDir; "server" serves it over
// HTTP (readiness: /ready.html, absent at first; liveness: /www/alive,
// which the server creates at each start); "logger" writes ~3 kB/s of
// numbered lines. Images come through berth's registry mirrors, one from
// each mirrored registry.
const webPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: www
    emptyDir: {}
  initContainers:
  - name: init
    image: busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo berth-init-ran > /www/index.html; echo init done"]
    volumeMounts: [{name: www, mountPath: /www}]
  containers:
  - name: server
    image: busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "touch /www/alive; exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080}]
    volumeMounts: [{name: www, mountPath: /www}]
    readinessProbe:
      httpGet: {path: /ready.html, port: 8080}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      exec: {command: ["cat", "/www/alive"]}
      periodSeconds: 2
      failureThreshold: 3
      timeoutSeconds: 10
  - name: logger
    image: registry.k8s.io/e2e-test-images/busybox:1.29-2
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "i=0; while true; do echo \"logline $i ........................................\"; i=$((i+1)); sleep 0.02; done"]
`

// crashPod exits 3 at once, every time.
const crashPod = `apiVersion: v1
kind: Pod
metadata:
  name: crash
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: crash
    image: registry.k8s.io/e2e-test-images/busybox:1.29-2
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo crashing; exit 3"]
`

// oomPod touches a 100 MiB buffer under a 32 MiB limit.
const oomPod = `apiVersion: v1
kind: Pod
metadata:
  name: oom
  namespace: default
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: oom
    image: busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo allocating; dd if=/dev/zero of=/dev/null bs=100M count=1"]
    resources:
      limits: {memory: 32Mi}
`

func TestStandalone(t *testing.T) {
	e := newEnv(t)
	k := e.startKubelet(kubeletOptions{})
	// Static pods are named <name>-<node>.
	webName, crashName, oomName := "web-"+e.nodeName, "crash-"+e.nodeName, "oom-"+e.nodeName

	manifests := []string{k.writeManifest("crash", crashPod), k.writeManifest("oom", oomPod), k.writeManifest("web", webPod)}
	crash := watchRestarts(t, k, crashName)

	var web *pod
	var sandbox *runtimeapi.PodSandbox
	if !t.Run("running", func(t *testing.T) {
		web = k.waitPod(t, webName, 4*time.Minute, "Running, init container done, both containers running", func(p *pod) bool {
			init, s, l := p.container("init"), p.container("server"), p.container("logger")
			return p.Status.Phase == "Running" && p.Status.PodIP != "" &&
				init != nil && init.State.Terminated != nil &&
				s != nil && s.State.Running != nil && l != nil && l.State.Running != nil
		})
		if init := web.container("init").State.Terminated; init.ExitCode != 0 || init.Reason != "Completed" {
			t.Errorf("init container: %+v", init)
		}
		ip := net.ParseIP(web.Status.PodIP)
		if ip == nil || !e.subnet.Contains(ip) {
			t.Errorf("pod IP %s is not in the pod subnet %s", web.Status.PodIP, e.subnet)
		}
		sbs := e.podSandboxes(t, web.Metadata.UID)
		if len(sbs) != 1 || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Fatalf("berth's sandboxes of %s: %v", webName, sbs)
		}
		sandbox = sbs[0]
		st, err := e.d.Runtime.PodSandboxStatus(framework.Ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandbox.Id, Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Status.GetNetwork().GetIp(); got != web.Status.PodIP {
			t.Errorf("berth says the pod IP is %s, the kubelet %s", got, web.Status.PodIP)
		}
		// The pod's cgroup is the one the kubelet chose, under its cgroupRoot.
		pause := infoPid(st.Info)
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pause))
		want := e.cgroup + "/kubepods/besteffort/pod" + web.Metadata.UID + "/"
		line := ":memory:" + want // v1: the memory hierarchy's line
		if framework.CgroupV2() {
			line = "0::" + want
		}
		if !strings.Contains(string(cg), line) {
			t.Errorf("pause (pid %d) is not under %s:\n%s", pause, want, cg)
		}
		// The init container's file, served by the server on the pod IP.
		waitFor(t, 30*time.Second, "index.html from the pod IP", func() (bool, string) {
			body, err := httpGet("http://" + net.JoinHostPort(web.Status.PodIP, "8080") + "/index.html")
			if err != nil {
				return false, err.Error()
			}
			return body == "berth-init-ran\n", fmt.Sprintf("body %q", body)
		})
	}) {
		t.FailNow()
	}
	ctrID := func(t *testing.T, name string) string {
		t.Helper()
		for _, c := range e.podContainers(t, web.Metadata.UID) {
			if c.Metadata.Name == name && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				return c.Id
			}
		}
		t.Fatalf("no running container %s in berth", name)
		return ""
	}
	ready := func(want bool) func(p *pod) bool {
		return func(p *pod) bool {
			s := p.container("server")
			return s != nil && s.Ready == want && (p.condition("Ready") == "True") == want
		}
	}

	t.Run("readiness probe", func(t *testing.T) {
		// /ready.html does not exist yet: not ready, however long.
		time.Sleep(3 * time.Second)
		k.waitPod(t, webName, time.Second, "not ready without /ready.html", ready(false))
		e.exec(t, ctrID(t, "server"), "touch", "/www/ready.html")
		k.waitPod(t, webName, 30*time.Second, "ready once /ready.html exists", ready(true))
		e.exec(t, ctrID(t, "server"), "rm", "/www/ready.html")
		k.waitPod(t, webName, 30*time.Second, "not ready once /ready.html is gone", ready(false))
		e.exec(t, ctrID(t, "server"), "touch", "/www/ready.html")
		k.waitPod(t, webName, 30*time.Second, "ready again", ready(true))
	})

	t.Run("liveness probe", func(t *testing.T) {
		before := ctrID(t, "server")
		e.exec(t, before, "rm", "/www/alive")
		p := k.waitPod(t, webName, time.Minute, "server restarted by its liveness probe", func(p *pod) bool {
			s := p.container("server")
			return s.RestartCount == 1 && s.State.Running != nil && s.LastState.Terminated != nil
		})
		if s := p.container("server"); !strings.HasSuffix(s.ContainerID, "://"+ctrID(t, "server")) || ctrID(t, "server") == before {
			t.Errorf("server's container after the restart: kubelet %s, berth %s, before %s", s.ContainerID, ctrID(t, "server"), before)
		}
		if l := p.container("logger"); l.RestartCount != 0 {
			t.Errorf("logger restarted too: %s", p)
		}
		k.waitPod(t, webName, 30*time.Second, "ready after the restart", ready(true))
	})

	t.Run("logs and rotation", func(t *testing.T) {
		dir := filepath.Join(k.podLogs, fmt.Sprintf("default_%s_%s", webName, web.Metadata.UID))
		if b, err := os.ReadFile(filepath.Join(dir, "init", "0.log")); err != nil || !strings.Contains(string(b), " stdout F init done\n") {
			t.Errorf("init container's log: %q, %v", b, err)
		}
		logger := filepath.Join(dir, "logger")
		// Two rotations at least: a rotated file and a compressed older one.
		var files []string
		waitFor(t, time.Minute, "two rotations of logger's log", func() (bool, string) {
			files, _ = filepath.Glob(filepath.Join(logger, "0.log*"))
			gz := slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, ".gz") })
			return len(files) >= 3 && gz, fmt.Sprint(files)
		})
		time.Sleep(4 * time.Second) // the latest rotation's ReopenContainerLog is done
		first, last, err := checkLogLinesStable(logger)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("logger's lines %d..%d across %d files, contiguous", first, last, len(files))
		// Still written to after the rotations: 0.log grows.
		st1, _ := os.Stat(filepath.Join(logger, "0.log"))
		time.Sleep(time.Second)
		_, last2, err := checkLogLinesStable(logger)
		if err != nil {
			t.Fatal(err)
		}
		if last2 <= last {
			t.Errorf("no new line in logger's log after a second (%d then %d; 0.log %d bytes)", last, last2, st1.Size())
		}
		// The kubelet's own reader (what kubectl logs uses).
		// The kubelet reads the current file only: right after a rotation
		// it holds fewer than 2 lines, for a moment none.
		waitFor(t, 10*time.Second, "the kubelet's /containerLogs?tailLines=2", func() (bool, string) {
			b, err := k.get(fmt.Sprintf("/containerLogs/default/%s/logger?tailLines=2", webName))
			return err == nil && regexp.MustCompile(`^(logline \d+ \.+\n){1,2}$`).Match(b), fmt.Sprintf("%q, %v", b, err)
		})
	})

	t.Run("crash back-off", func(t *testing.T) {
		crash.wait(t)
	})

	t.Run("OOM killed", func(t *testing.T) {
		p := k.waitPod(t, oomName, 2*time.Minute, "terminated", func(p *pod) bool {
			c := p.container("oom")
			return c != nil && c.State.Terminated != nil
		})
		c := p.container("oom").State.Terminated
		if c.Reason != "OOMKilled" || c.ExitCode != 137 || p.Status.Phase != "Failed" {
			t.Errorf("want OOMKilled, exit 137, phase Failed: %s", p)
		}
	})

	t.Run("berth SIGKILLed", func(t *testing.T) {
		checkBerthKill(t, e, web.Metadata.UID, web.Status.PodIP, func(t *testing.T, what string) *pod {
			return k.waitPod(t, webName, 30*time.Second, what, ready(true))
		})
	})

	t.Run("delete", func(t *testing.T) {
		// Every pod: each one's sandbox, containers, lease and cgroup go.
		pods, err := k.pods()
		if err != nil {
			t.Fatal(err)
		}
		type gone struct {
			name, uid, ip string
			pids          []int
		}
		var all []gone
		for _, name := range []string{webName, crashName, oomName} {
			p := pods[name]
			if p == nil {
				t.Fatalf("no pod %s", name)
			}
			g := gone{name: name, uid: p.Metadata.UID}
			for _, sb := range e.podSandboxes(t, p.Metadata.UID) {
				st, err := e.d.Runtime.PodSandboxStatus(framework.Ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id, Verbose: true})
				if err != nil {
					t.Fatal(err)
				}
				g.ip = st.Status.GetNetwork().GetIp()
				g.pids = append(g.pids, infoPid(st.Info))
			}
			all = append(all, g)
		}
		leases := e.leases()
		for _, g := range all {
			if g.ip != "" && !slices.Contains(leases, g.ip) {
				t.Errorf("%s: no lease for %s before deletion (leases %v)", g.name, g.ip, leases)
			}
		}
		for _, m := range manifests {
			if err := os.Remove(m); err != nil {
				t.Fatal(err)
			}
		}
		// The kubelet removes stopped sandboxes of deleted pods in its
		// container GC, every minute.
		waitFor(t, 3*time.Minute, "every container and sandbox removed", func() (bool, string) {
			var left []string
			for _, g := range all {
				for _, sb := range e.podSandboxes(t, g.uid) {
					left = append(left, fmt.Sprintf("sandbox %s of %s (%s)", sb.Id[:12], g.name, sb.State))
				}
				for _, c := range e.podContainers(t, g.uid) {
					left = append(left, fmt.Sprintf("container %s of %s (%s)", c.Metadata.Name, g.name, c.State))
				}
			}
			return len(left) == 0, strings.Join(left, ", ")
		})
		pods, err = k.pods()
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) != 0 {
			t.Errorf("the kubelet still has pods: %v", pods)
		}
		if l := e.leases(); len(l) != 0 {
			t.Errorf("IP leases left: %v", l)
		}
		for _, g := range all {
			for _, pid := range g.pids {
				if pid > 0 && syscall.Kill(pid, 0) == nil {
					t.Errorf("%s: pause %d still runs", g.name, pid)
				}
			}
			if d := slices.Concat(kubehost.CgroupDirs(e.cgroup+"/kubepods/besteffort/pod"+g.uid), kubehost.CgroupDirs(e.cgroup+"/kubepods/burstable/pod"+g.uid)); len(d) > 0 {
				t.Errorf("%s: pod cgroup left: %v", g.name, d)
			}
		}
		if m := describeMounts(e.d.State); len(m) > 0 {
			t.Errorf("mounts left under berth's state: %v", m)
		}
	})
}

// restartWatch follows a crashing pod in the background: the times its
// restart count went up, and whether the kubelet said CrashLoopBackOff.
type restartWatch struct {
	k       *kubelet
	name    string
	done    chan struct{}
	counts  []time.Time // counts[i]: when restart count i+1 was first seen
	backoff bool
	last    string
	err     error
}

// watchRestarts polls the kubelet's /pods every 200ms until the pod has
// restarted 3 times (or 4 minutes passed).
func watchRestarts(t *testing.T, k *kubelet, name string) *restartWatch {
	w := &restartWatch{k: k, name: name, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		deadline := time.Now().Add(4 * time.Minute)
		for time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			pods, err := k.pods()
			if err != nil {
				w.err = err
				continue
			}
			p := pods[name]
			if p == nil || p.container("crash") == nil {
				continue
			}
			c := p.container("crash")
			w.last = p.String()
			if c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff" {
				w.backoff = true
			}
			for len(w.counts) < c.RestartCount {
				w.counts = append(w.counts, time.Now())
			}
			if len(w.counts) >= 3 && w.backoff && c.LastState.Terminated != nil {
				if c.LastState.Terminated.ExitCode != 3 {
					w.err = fmt.Errorf("last exit %d, want 3: %s", c.LastState.Terminated.ExitCode, p)
				}
				return
			}
		}
		w.err = fmt.Errorf("not 3 restarts with CrashLoopBackOff in 4 minutes: %s (%v)", w.last, w.err)
	}()
	t.Cleanup(func() { <-w.done })
	return w
}

func (w *restartWatch) wait(t *testing.T) {
	<-w.done
	if w.err != nil {
		t.Fatal(w.err)
	}
	// Back-off doubles: the wait before the 3rd restart is longer than
	// before the 2nd.
	g1, g2 := w.counts[1].Sub(w.counts[0]), w.counts[2].Sub(w.counts[1])
	t.Logf("restarts 1->2 after %.1fs, 2->3 after %.1fs; %s", g1.Seconds(), g2.Seconds(), w.last)
	if g2 <= g1 {
		t.Errorf("back-off did not grow: %s then %s", g1, g2)
	}
}

// checkLogLinesStable is checkLogLines tried up to 5 times: a file the
// kubelet rotates or compresses between the listing and the reading makes
// lines look missing for one try, a real gap stays.
func checkLogLinesStable(dir string) (first, last int, err error) {
	for range 5 {
		if first, last, err = checkLogLines(dir); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	return
}

var criLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) stdout F logline (\d+) \.+$`)

// checkLogLines reads every log file of a container (rotated, compressed
// or not, and the current one), checks that each line is in the CRI
// format, and that the logger's numbers form one run without gaps or
// repeats. It returns the first and last number.
func checkLogLines(dir string) (first, last int, err error) {
	files, _ := filepath.Glob(filepath.Join(dir, "0.log*"))
	seen := map[int]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, ".tmp") {
			continue
		}
		fh, err := os.Open(f)
		if err != nil {
			if os.IsNotExist(err) { // rotated away meanwhile
				continue
			}
			return 0, 0, err
		}
		var r io.Reader = fh
		if strings.HasSuffix(f, ".gz") {
			gz, err := gzip.NewReader(fh)
			if err != nil {
				fh.Close()
				return 0, 0, fmt.Errorf("%s: %w", f, err)
			}
			r = gz
		}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			m := criLine.FindStringSubmatch(sc.Text())
			if m == nil {
				fh.Close()
				return 0, 0, fmt.Errorf("%s: not a logger line in the CRI format: %q", f, sc.Text())
			}
			n, _ := strconv.Atoi(m[3])
			if seen[n] {
				fh.Close()
				return 0, 0, fmt.Errorf("%s: line %d twice", f, n)
			}
			seen[n] = true
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", f, err)
		}
	}
	if len(seen) == 0 {
		return 0, 0, fmt.Errorf("no lines in %v", files)
	}
	nums := slices.Sorted(func(yield func(int) bool) {
		for n := range seen {
			if !yield(n) {
				return
			}
		}
	})
	first, last = nums[0], nums[len(nums)-1]
	if len(nums) != last-first+1 {
		var missing []int
		for i := 1; i < len(nums) && len(missing) < 10; i++ {
			for n := nums[i-1] + 1; n < nums[i] && len(missing) < 10; n++ {
				missing = append(missing, n)
			}
		}
		return 0, 0, fmt.Errorf("lines %d..%d of the logger: %d missing, first missing %v (files %v)", first, last, last-first+1-len(nums), missing, files)
	}
	return first, last, nil
}
