package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// endpoint is one runtime under test.
type endpoint struct {
	name   string
	socket string // path, without unix://
	conn   *grpc.ClientConn
	rt     runtimeapi.RuntimeServiceClient
	img    runtimeapi.ImageServiceClient
	pid    int    // the daemon
	log    string // the daemon's log, when it is berth's
	image  string // the container image's id, resolved after pulling
	res    *Result
	// pods still to tear down, for the cleanup after a failure
	mu   sync.Mutex
	live map[string]*pod
}

func (e *endpoint) track(p *pod, live bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if live {
		e.live[p.id] = p
	} else {
		delete(e.live, p.id)
	}
}

func (e *endpoint) livePods() []*pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*pod, 0, len(e.live))
	for _, p := range e.live {
		out = append(out, p)
	}
	return out
}

func dial(name, addr string) (*endpoint, error) {
	socket := strings.TrimPrefix(addr, "unix://")
	if !filepath.IsAbs(socket) {
		return nil, fmt.Errorf("endpoint %s: want unix:///absolute/path, got %q", name, addr)
	}
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", name, err)
	}
	return &endpoint{
		name: name, socket: socket, conn: conn,
		rt:   runtimeapi.NewRuntimeServiceClient(conn),
		img:  runtimeapi.NewImageServiceClient(conn),
		res:  &Result{Runtime: name},
		live: map[string]*pod{},
	}, nil
}

// pod is one benchmark pod: a sandbox with one sleeping container.
type pod struct {
	id, ctr string
	uid     string
	cfg     *runtimeapi.PodSandboxConfig
}

// podSpec builds what the kubelet would send for a BestEffort pod with
// one container: pod-level network and IPC, a container-level PID
// namespace, the kubelet's default masked and read-only paths, a cgroup
// parent per pod and a log directory the kubelet would have created.
type podSpec struct {
	namespace  string
	cgroupRoot string // cgroupfs path, e.g. /berth-bench-1234
	logRoot    string
	image      string
}

var (
	defaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

func newUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (s *podSpec) sandboxConfig(name string) (*runtimeapi.PodSandboxConfig, error) {
	uid := newUID()
	logDir := filepath.Join(s.logRoot, s.namespace+"_"+name+"_"+uid)
	// The kubelet makes the pod's and the container's log directories.
	if err := os.MkdirAll(filepath.Join(logDir, "sleep"), 0o755); err != nil {
		return nil, err
	}
	nsOpts := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: s.namespace, Uid: uid},
		Hostname:     name,
		LogDirectory: logDir,
		DnsConfig: &runtimeapi.DNSConfig{
			Servers:  []string{"10.96.0.10"},
			Searches: []string{s.namespace + ".svc.cluster.local", "svc.cluster.local", "cluster.local"},
			Options:  []string{"ndots:5"},
		},
		Labels: map[string]string{
			"app":                         "bench",
			"io.kubernetes.pod.name":      name,
			"io.kubernetes.pod.namespace": s.namespace,
			"io.kubernetes.pod.uid":       uid,
		},
		Annotations: map[string]string{"kubernetes.io/config.source": "api"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: s.cgroupRoot + "/pod" + uid,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: nsOpts,
			},
		},
	}, nil
}

func (s *podSpec) containerConfig(image string, pcfg *runtimeapi.PodSandboxConfig) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
		Image:    &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: s.image},
		Command:  []string{"sleep", "3600"},
		LogPath:  "sleep/0.log",
		Labels: map[string]string{
			"io.kubernetes.container.name": "sleep",
			"io.kubernetes.pod.name":       pcfg.Metadata.Name,
			"io.kubernetes.pod.namespace":  pcfg.Metadata.Namespace,
			"io.kubernetes.pod.uid":        pcfg.Metadata.Uid,
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: pcfg.Linux.SecurityContext.NamespaceOptions,
				MaskedPaths:      defaultMaskedPaths,
				ReadonlyPaths:    defaultReadonlyPaths,
			},
		},
	}
}

// startPod runs RunPodSandbox, CreateContainer and StartContainer and
// returns the time of each.
func (e *endpoint) startPod(ctx context.Context, s *podSpec, name string) (*pod, [3]time.Duration, error) {
	var d [3]time.Duration
	cfg, err := s.sandboxConfig(name)
	if err != nil {
		return nil, d, err
	}
	ccfg := s.containerConfig(e.image, cfg)
	t0 := time.Now()
	run, err := e.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	t1 := time.Now()
	if err != nil {
		return nil, d, fmt.Errorf("%s: RunPodSandbox %s: %w", e.name, name, err)
	}
	p := &pod{id: run.PodSandboxId, uid: cfg.Metadata.Uid, cfg: cfg}
	e.track(p, true)
	cr, err := e.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: ccfg, SandboxConfig: cfg})
	t2 := time.Now()
	if err != nil {
		return nil, d, fmt.Errorf("%s: CreateContainer in %s: %w", e.name, name, err)
	}
	p.ctr = cr.ContainerId
	_, err = e.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: p.ctr})
	t3 := time.Now()
	if err != nil {
		return nil, d, fmt.Errorf("%s: StartContainer in %s: %w", e.name, name, err)
	}
	d = [3]time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2)}
	return p, d, nil
}

// execTrue runs `true` in the pod's container with ExecSync and returns
// how long the call took.
func (e *endpoint) execTrue(ctx context.Context, p *pod) (time.Duration, error) {
	c, cancel := rpcCtx(ctx)
	defer cancel()
	start := time.Now()
	resp, err := e.rt.ExecSync(c, &runtimeapi.ExecSyncRequest{ContainerId: p.ctr, Cmd: []string{"true"}, Timeout: 10})
	el := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s: ExecSync: %w", e.name, err)
	}
	if resp.ExitCode != 0 {
		return 0, fmt.Errorf("%s: ExecSync true exited %d: %s", e.name, resp.ExitCode, resp.Stderr)
	}
	return el, nil
}

// stopPod is the kubelet's teardown of a pod whose container ignores
// SIGTERM (sleep as PID 1): StopContainer with no grace, RemoveContainer,
// StopPodSandbox, RemovePodSandbox.
func (e *endpoint) stopPod(ctx context.Context, p *pod) ([4]time.Duration, error) {
	var d [4]time.Duration
	t0 := time.Now()
	if p.ctr != "" {
		if _, err := e.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: p.ctr, Timeout: 0}); err != nil {
			return d, fmt.Errorf("%s: StopContainer %s: %w", e.name, p.ctr, err)
		}
	}
	t1 := time.Now()
	if p.ctr != "" {
		if _, err := e.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: p.ctr}); err != nil {
			return d, fmt.Errorf("%s: RemoveContainer %s: %w", e.name, p.ctr, err)
		}
	}
	t2 := time.Now()
	if _, err := e.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
		return d, fmt.Errorf("%s: StopPodSandbox %s: %w", e.name, p.id, err)
	}
	t3 := time.Now()
	if _, err := e.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
		return d, fmt.Errorf("%s: RemovePodSandbox %s: %w", e.name, p.id, err)
	}
	t4 := time.Now()
	e.track(p, false)
	os.RemoveAll(p.cfg.LogDirectory)
	return [4]time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3)}, nil
}

// containerPid asks the runtime (verbose ContainerStatus, whose "info"
// JSON both containerd and berth fill with "pid") for the container's
// process.
func (e *endpoint) containerPid(ctx context.Context, id string) (int, error) {
	st, err := e.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, err
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("%s: container %s: no pid in verbose status", e.name, id)
	}
	return info.Pid, nil
}

// pull pulls ref and returns its image id.
func (e *endpoint) pull(ctx context.Context, ref string) (string, error) {
	resp, err := e.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return "", fmt.Errorf("%s: pull %s: %w", e.name, ref, err)
	}
	return resp.ImageRef, nil
}

func (e *endpoint) removeImage(ctx context.Context, ref string) error {
	st, err := e.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return fmt.Errorf("%s: image status %s: %w", e.name, ref, err)
	}
	if st.GetImage() == nil {
		return nil
	}
	if _, err := e.img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: st.Image.Id}}); err != nil {
		return fmt.Errorf("%s: remove image %s: %w", e.name, ref, err)
	}
	return nil
}
