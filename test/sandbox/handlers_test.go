package sandbox_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// handlersConfig configures the handler the Kubernetes e2e suites'
// RuntimeClass specs use, and one of every setting.
const handlersConfig = `
[runtimes.test-handler]

[runtimes.locked]
privileged_without_host_devices = true
disable_user_namespaces = true
disable_recursive_read_only_mounts = true
default_annotations = ["io.berth.test/handler=locked", "io.berth.test/shadowed=handler"]
`

// TestRuntimeHandlers drives configured runtime handlers through the CRI
// socket: Status lists each with its features, RunPodSandbox refuses a
// handler not configured naming the known ones, a pod of a handler gets
// its settings in its containers' specs, and keeps its handler across a
// restart of berth.
func TestRuntimeHandlers(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-handlers")
	if err := os.WriteFile(e.D.ConfigPath, []byte(handlersConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	e.D.Restart()
	ctx := framework.Ctx(t)

	st, err := e.D.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	features := map[string]*runtimeapi.RuntimeHandlerFeatures{}
	for _, h := range st.GetRuntimeHandlers() {
		names = append(names, h.GetName())
		features[h.GetName()] = h.GetFeatures()
	}
	if got := strings.Join(names, ","); got != ",berth,locked,runc,test-handler" {
		t.Errorf("Status lists handlers %q, want \"\" then berth, locked, runc, test-handler", names)
	}
	if f := features["locked"]; f.GetUserNamespaces() || f.GetRecursiveReadOnlyMounts() {
		t.Errorf("handler locked reports %v; its config disables both", f)
	}
	if features["test-handler"].GetRecursiveReadOnlyMounts() != features[""].GetRecursiveReadOnlyMounts() ||
		features["test-handler"].GetUserNamespaces() != features[""].GetUserNamespaces() {
		t.Errorf("test-handler reports %v, the default %v: both are berth's runtime as it is", features["test-handler"], features[""])
	}

	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "kata", Namespace: "e2e", Uid: "uid-kata-" + framework.RandHex(3)},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.Parent},
	}
	_, err = e.D.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "kata"})
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), `"kata"`) ||
		!strings.Contains(s.Message(), `"test-handler"`) || !strings.Contains(s.Message(), `"locked"`) {
		t.Errorf("RunPodSandbox with handler kata: %v; want InvalidArgument naming kata and the configured handlers", err)
	}
	if pods, _ := e.D.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); len(pods.GetItems()) != 0 {
		t.Errorf("the refused RunPodSandbox left pods: %v", pods.GetItems())
	}

	privileged := func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
	}
	run := func(name, handler string) (string, *runtimeapi.PodSandboxConfig) {
		t.Helper()
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: "uid-" + name + "-" + framework.RandHex(3)},
			Hostname:     name,
			LogDirectory: t.TempDir(),
			Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.Parent},
		}
		privileged(cfg)
		resp, err := e.D.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
		if err != nil {
			t.Fatalf("RunPodSandbox %s (handler %q): %v", name, handler, err)
		}
		return resp.PodSandboxId, cfg
	}
	priv := func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{Privileged: true}}
		c.Annotations = map[string]string{"io.berth.test/shadowed": "container"}
	}
	plainPod, plainCfg := run("plain", "")
	lockedPod, lockedCfg := run("locked", "locked")
	testPod, _ := run("test", "test-handler")
	plain := e.Run(plainPod, plainCfg, "plain", "sleep 1000", priv)
	locked := e.Run(lockedPod, lockedCfg, "locked", "sleep 1000", priv)

	checkHandler := func(pod, want string) {
		t.Helper()
		resp, err := e.D.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetStatus().GetRuntimeHandler(); got != want {
			t.Errorf("pod %s has runtime handler %q, want %q", pod, got, want)
		}
	}
	checkSpec := func(ctr string, hostDevices bool, ann map[string]string) {
		t.Helper()
		resp, err := e.D.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr, Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Spec struct {
				Annotations map[string]string `json:"annotations"`
				Linux       struct {
					Devices []struct{ Path string } `json:"devices"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		}
		if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil {
			t.Fatalf("container %s: verbose info: %v", ctr, err)
		}
		spec := info.Spec
		if got := len(spec.Linux.Devices) > 0; got != hostDevices {
			t.Errorf("container %s: privileged with %d host devices, want host devices: %t", ctr, len(spec.Linux.Devices), hostDevices)
		}
		for k, v := range ann {
			if spec.Annotations[k] != v {
				t.Errorf("container %s: annotation %s = %q, want %q", ctr, k, spec.Annotations[k], v)
			}
		}
	}
	checkAll := func() {
		t.Helper()
		checkHandler(plainPod, "")
		checkHandler(lockedPod, "locked")
		checkHandler(testPod, "test-handler")
		checkSpec(plain, true, map[string]string{"io.berth.test/handler": "", "io.berth.test/shadowed": "container"})
		checkSpec(locked, false, map[string]string{"io.berth.test/handler": "locked", "io.berth.test/shadowed": "container"})
	}
	checkAll()

	// A recursive read-only mount in a pod of a handler that disables
	// them is refused, naming the handler.
	_, err = e.D.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: lockedPod, SandboxConfig: lockedCfg, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "rro"},
		Image:    &runtimeapi.ImageSpec{Image: e.Image},
		Command:  []string{"true"},
		Mounts:   []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: t.TempDir(), Readonly: true, RecursiveReadOnly: true}},
	}})
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), `"locked"`) || !strings.Contains(s.Message(), "recursive_read_only") {
		t.Errorf("CreateContainer with a recursive read-only mount in a pod of handler locked: %v; want InvalidArgument naming the handler", err)
	}

	// The handler is the pod's, across a restart of berth: a container
	// made afterwards still gets its settings.
	e.D.Restart()
	checkAll()
	after := e.Run(lockedPod, lockedCfg, "after", "sleep 1000", priv)
	checkSpec(after, false, map[string]string{"io.berth.test/handler": "locked"})
}
