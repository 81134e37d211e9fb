package container_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// nriPlugin adjusts the containers named "adjusted", refuses those named
// "refused", forces CPU shares on every CRI update, and records events.
type nriPlugin struct {
	hostDir string
	synced  chan struct{}
	once    sync.Once

	mu       sync.Mutex
	events   []string
	syncCtrs []string
	exits    map[string]int32
}

func (p *nriPlugin) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	for _, c := range ctrs {
		p.syncCtrs = append(p.syncCtrs, c.Id)
	}
	p.mu.Unlock()
	p.once.Do(func() { close(p.synced) })
	return nil, nil
}

func (p *nriPlugin) record(e string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
}

func (p *nriPlugin) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

func (p *nriPlugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.record("create " + c.Name)
	switch c.Name {
	case "refused":
		return nil, nil, errors.New("refused by the test plugin")
	case "adjusted":
	default:
		return nil, nil, nil
	}
	a := &api.ContainerAdjustment{}
	a.AddEnv("NRI_ADDED", "yes")
	a.AddMount(&api.Mount{Destination: "/nri-data", Source: p.hostDir, Type: "bind", Options: []string{"rbind", "ro"}})
	a.AddAnnotation("nri.test/added", "yes")
	a.AddDevice(&api.LinuxDevice{Path: "/dev/nri-null", Type: "c", Major: 1, Minor: 3, FileMode: api.FileMode(0o666)})
	a.SetLinuxMemoryLimit(96 << 20)
	a.SetLinuxPidLimits(77)
	a.AddRlimit("RLIMIT_NOFILE", 4321, 4321)
	return a, nil, nil
}

func (p *nriPlugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	u := &api.ContainerUpdate{}
	u.SetContainerId(c.Id)
	u.SetLinuxCPUShares(333)
	return []*api.ContainerUpdate{u}, nil
}

func (p *nriPlugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.record("stop " + c.Name)
	p.mu.Lock()
	p.exits[c.Name] = c.ExitCode
	p.mu.Unlock()
	return nil, nil
}

func (p *nriPlugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record("remove " + c.Name)
	return nil
}

// connectNRI connects p to berth's NRI socket until the test ends and
// waits for its Synchronize.
func connectNRI(t *testing.T, sock string, p *nriPlugin) stub.Stub {
	t.Helper()
	p.synced = make(chan struct{})
	p.exits = map[string]int32{}
	s, err := stub.New(p, stub.WithSocketPath(sock), stub.WithPluginName("e2e"), stub.WithPluginIdx("50"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); s.Stop(); <-done })
	select {
	case <-p.synced:
	case <-time.After(20 * time.Second):
		t.Fatal("the NRI plugin was not synchronised in 20s")
	}
	// Synchronize returns just before berth registers the plugin.
	time.Sleep(100 * time.Millisecond)
	return s
}

// cgroupValue reads a cgroup file of a container (v1's in controller's
// hierarchy, or v2's), from the cgroups path of its OCI spec (verbose
// status).
func (e *env) cgroupValue(id, controller, v1File, v2File string) string {
	e.t.Helper()
	resp, err := e.d.Runtime.ContainerStatus(framework.Ctx(e.t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		e.t.Fatal(err)
	}
	info := resp.Info["info"]
	const key = `"cgroupsPath":"`
	i := strings.Index(info, key)
	if i < 0 {
		e.t.Fatalf("no cgroupsPath in %s", info)
	}
	path := info[i+len(key):]
	path = path[:strings.IndexByte(path, '"')]
	b, err := os.ReadFile(framework.CgroupFile(path, controller, v1File, v2File))
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestNRI(t *testing.T) {
	dir, err := os.MkdirTemp("", "nri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "nri.sock")
	e := newEnv(t, framework.WithArgs("--nri", "--nri-socket", sock),
		framework.WithConfig(fmt.Sprintf("[nri]\nplugin_path = %q\nplugin_config_path = %q\n", dir+"/plugins", dir+"/conf")))
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "hello"), []byte("world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &nriPlugin{hostDir: data}
	s := connectNRI(t, sock, p)

	podCfg := e.podConfig("nri")
	pod := e.runPod(podCfg)

	t.Run("adjustment", func(t *testing.T) {
		id := e.run(pod, podCfg, e.ctrConfig("adjusted", "sleep 3600"))
		out := e.exec(id, 10, "sh", "-c", `echo $NRI_ADDED; cat /nri-data/hello; ls /dev/nri-null; ulimit -n; touch /nri-data/x 2>/dev/null || echo ro`)
		if got, want := string(out.Stdout), "yes\nworld\n/dev/nri-null\n4321\nro\n"; got != want {
			t.Errorf("in the container: %q (stderr %q), want %q", got, out.Stderr, want)
		}
		if got := e.cgroupValue(id, "memory", "memory.limit_in_bytes", "memory.max"); got != fmt.Sprint(96<<20) {
			t.Errorf("memory.limit_in_bytes = %s", got)
		}
		if got := e.cgroupValue(id, "pids", "pids.max", "pids.max"); got != "77" {
			t.Errorf("pids.max = %s", got)
		}
		st := e.status(id)
		if got := st.GetResources().GetLinux().GetMemoryLimitInBytes(); got != 96<<20 {
			t.Errorf("status memory limit %d", got)
		}

		// A CRI update, which the plugin changes.
		if _, err := e.d.Runtime.UpdateContainerResources(framework.Ctx(t), &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 128 << 20},
		}); err != nil {
			t.Fatal(err)
		}
		if got := e.cgroupValue(id, "cpu", "cpu.shares", "cpu.weight"); got != cpuSharesValue(333) {
			t.Errorf("cpu.shares after a CRI update = %s, want the plugin's 333", got)
		}
		if got := e.cgroupValue(id, "memory", "memory.limit_in_bytes", "memory.max"); got != fmt.Sprint(128<<20) {
			t.Errorf("memory.limit_in_bytes after a CRI update = %s", got)
		}

		// An update the plugin sends on its own: only the memory changes.
		u := &api.ContainerUpdate{}
		u.SetContainerId(id)
		u.SetLinuxMemoryLimit(160 << 20)
		if failed, err := s.UpdateContainers([]*api.ContainerUpdate{u}); err != nil || len(failed) > 0 {
			t.Fatalf("UpdateContainers: %v, failed %v", err, failed)
		}
		if got := e.cgroupValue(id, "memory", "memory.limit_in_bytes", "memory.max"); got != fmt.Sprint(160<<20) {
			t.Errorf("memory.limit_in_bytes after the plugin's update = %s", got)
		}
		if got := e.cgroupValue(id, "cpu", "cpu.shares", "cpu.weight"); got != cpuSharesValue(333) {
			t.Errorf("cpu.shares after the plugin's memory update = %s", got)
		}
		st = e.status(id)
		if r := st.GetResources().GetLinux(); r.GetMemoryLimitInBytes() != 160<<20 || r.GetCpuShares() != 333 {
			t.Errorf("status resources %v", r)
		}
	})

	t.Run("refused", func(t *testing.T) {
		_, err := e.d.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod, Config: e.ctrConfig("refused", "true"), SandboxConfig: podCfg,
		})
		if err == nil || !strings.Contains(err.Error(), "refused by the test plugin") {
			t.Fatalf("CreateContainer refused by a plugin: %v", err)
		}
		resp, err := e.d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range resp.Containers {
			if c.Metadata.Name == "refused" {
				t.Errorf("refused container listed: %s", c.Id)
			}
		}
		if !slices.Contains(p.seen(), "remove refused") {
			t.Errorf("plugin not told the refused container is gone: %q", p.seen())
		}
	})

	t.Run("exit", func(t *testing.T) {
		id := e.run(pod, podCfg, e.ctrConfig("short", "exit 3"))
		e.waitExit(id, 20*time.Second)
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Contains(p.seen(), "stop short") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		p.mu.Lock()
		code, ok := p.exits["short"]
		p.mu.Unlock()
		if !ok || code != 3 {
			t.Errorf("plugin told of the exit: %v, exit code %d", ok, code)
		}
		if _, err := e.d.Runtime.RemoveContainer(framework.Ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
		ev := p.seen()
		if i, j := slices.Index(ev, "stop short"), slices.Index(ev, "remove short"); i < 0 || j < i || slices.Index(ev[i+1:], "stop short") >= 0 {
			t.Errorf("events %q", ev)
		}
	})

	t.Run("restart", func(t *testing.T) {
		resp, err := e.d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{
			Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}},
		})
		if err != nil || len(resp.Containers) != 1 {
			t.Fatalf("running containers: %v %v", resp, err)
		}
		running := resp.Containers[0].Id
		e.d.Restart()
		// A plugin connecting to the new daemon learns of what survived.
		p2 := &nriPlugin{hostDir: data}
		connectNRI(t, sock, p2)
		if !slices.Contains(p2.syncCtrs, running) {
			t.Errorf("plugin synchronised with %v, want %s among them", p2.syncCtrs, running)
		}
	})
}
