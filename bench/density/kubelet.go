package density

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/test/kubehost"
)

// kubelet is the stock kubelet, standalone: static pods from a directory,
// no API server (the figures are the kubelet's and the runtime's alone).
type kubelet struct {
	dir, manifests string
	port, healthz  int
	cmd            *exec.Cmd
	done           chan struct{}
	client         *http.Client
	host           kubehost.Standalone
	log            string
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startKubelet writes kubehost's standalone KubeletConfiguration (the one
// test/kubelet runs) with cgroupRoot and maxPods as asked, and waits until
// it serves /pods.
func startKubelet(ctx context.Context, o *options, d *daemon, work, cgroupRoot string) (*kubelet, error) {
	k := &kubelet{dir: filepath.Join(work, "kubelet"), manifests: filepath.Join(work, "manifests"), log: filepath.Join(o.out, d.Name+"-kubelet.log")}
	for _, p := range []string{k.dir, k.manifests, filepath.Join(work, "pods")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	var err error
	if k.port, err = freePort(); err != nil {
		return nil, err
	}
	if k.healthz, err = freePort(); err != nil {
		return nil, err
	}
	k.host = kubehost.Standalone{
		Endpoint:        d.endpoint(),
		CgroupRoot:      cgroupRoot,
		StaticPodPath:   k.manifests,
		Address:         nodeAddr,
		Port:            k.port,
		HealthzPort:     k.healthz,
		PodLogsDir:      filepath.Join(work, "pods"),
		VolumePluginDir: filepath.Join(work, "volume-plugins"),
	}
	cfg := k.host.Config()
	cfg["maxPods"] = o.maxPods
	if o.featureGates != "" {
		gates := map[string]bool{}
		for _, g := range strings.Split(o.featureGates, ",") {
			k, v, ok := strings.Cut(g, "=")
			b, err := strconv.ParseBool(v)
			if !ok || err != nil {
				return nil, fmt.Errorf("feature gate %q: want NAME=true|false", g)
			}
			gates[k] = b
		}
		cfg["featureGates"] = gates
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	cfgPath := filepath.Join(work, "kubelet.json")
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(k.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	k.cmd = exec.Command(filepath.Join(o.kubeDir, "kubelet"),
		"--config", cfgPath,
		"--root-dir", k.dir,
		"--cert-dir", filepath.Join(work, "kubelet-pki"),
		"--hostname-override", "bdens-node",
		"--node-ip", nodeAddr,
		"--v", strconv.Itoa(o.kubeletV))
	k.cmd.Stdout, k.cmd.Stderr = logf, logf
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := k.cmd.Start(); err != nil {
		return nil, err
	}
	k.done = make(chan struct{})
	go func() { k.cmd.Wait(); close(k.done) }()
	k.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if !k.running() {
			return k, fmt.Errorf("the kubelet exited during start-up (%v); its log: %s", k.cmd.ProcessState, k.log)
		}
		_, err := k.get("/pods")
		if err == nil {
			return k, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return k, fmt.Errorf("the kubelet does not serve /pods: %w; its log: %s", err, k.log)
		}
	}
}

func (k *kubelet) running() bool {
	select {
	case <-k.done:
		return false
	default:
		return true
	}
}

func (k *kubelet) stop() {
	if k == nil || k.cmd == nil || !k.running() {
		return
	}
	k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.done:
	case <-time.After(20 * time.Second):
		k.cmd.Process.Kill()
		<-k.done
	}
}

func (k *kubelet) get(path string) ([]byte, error) {
	return k.host.Get(k.client, path)
}

func (k *kubelet) metrics() (*metrics, error) {
	resp, err := k.client.Get(k.host.URL("/metrics"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// pod is what the benchmark reads of the kubelet's /pods.
type pod struct {
	Metadata struct {
		Name        string            `json:"name"`
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Status struct {
		Phase             string `json:"phase"`
		PodIP             string `json:"podIP"`
		ContainerStatuses []struct {
			Ready bool `json:"ready"`
			State struct {
				Running *struct {
					StartedAt time.Time `json:"startedAt"`
				} `json:"running"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// running: the pod's phase is Running and its container runs.
func (p *pod) running() bool {
	if p.Status.Phase != "Running" || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

func (k *kubelet) pods() ([]*pod, error) {
	return kubehost.Pods[*pod](k.host, k.client)
}

// writeManifest writes a static pod atomically (the kubelet must never
// read half a file): one busybox container that exits at SIGTERM, so that
// the teardown measures the runtime, not a grace period.
func (k *kubelet) writeManifest(name string) error {
	yaml := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: c
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
`, name, busybox)
	tmp := filepath.Join(filepath.Dir(k.manifests), name+".yaml.tmp")
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(k.manifests, name+".yaml"))
}
