package kubelet_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/berth-runtime/berth/test/framework"
)

// fakeDevicePlugin is a kubelet device plugin (API v1beta1) of one
// resource, vendor.example/fake, with one device, gpu0, that it hands out
// the way current GPU plugins do: as a CDI name in the Allocate answer,
// nothing else (no device specs, no env, no mounts), so that whatever
// the container gets of it came through berth's CDI.
type fakeDevicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	socket string
	srv    *grpc.Server

	mu        sync.Mutex
	listed    bool
	allocated [][]string // device IDs of each Allocate
}

const (
	fakeResource = "vendor.example/fake"
	fakeCDIName  = "vendor.example/fake=gpu0"
)

func (p *fakeDevicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *fakeDevicePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: []*pluginapi.Device{{ID: "gpu0", Health: pluginapi.Healthy}}}); err != nil {
		return err
	}
	p.mu.Lock()
	p.listed = true
	p.mu.Unlock()
	<-s.Context().Done()
	return nil
}

func (p *fakeDevicePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		p.mu.Lock()
		p.allocated = append(p.allocated, c.DevicesIds)
		p.mu.Unlock()
		var cdi []*pluginapi.CDIDevice
		for range c.DevicesIds {
			cdi = append(cdi, &pluginapi.CDIDevice{Name: fakeCDIName})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{CdiDevices: cdi})
	}
	return resp, nil
}

func (p *fakeDevicePlugin) state() (bool, [][]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listed, append([][]string(nil), p.allocated...)
}

// startFakeDevicePlugin serves the plugin in the kubelet's device plugin
// dir and registers it with the kubelet; stopped and its socket removed
// when the test ends.
func startFakeDevicePlugin(t *testing.T) *fakeDevicePlugin {
	t.Helper()
	// The kubelet empties its device plugin dir when its device manager
	// starts, which is after its API serves: a plugin socket made before
	// that is deleted under the plugin.
	waitFor(t, time.Minute, "the kubelet's device plugin socket", func() (bool, string) {
		_, err := os.Stat(pluginapi.KubeletSocket)
		return err == nil, fmt.Sprint(err)
	})
	name := "berth-test-fake-" + framework.RandHex(3) + ".sock"
	p := &fakeDevicePlugin{socket: filepath.Join(pluginapi.DevicePluginPath, name), srv: grpc.NewServer()}
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatalf("device plugin socket: %v", err)
	}
	go p.srv.Serve(l)
	t.Cleanup(func() {
		p.srv.Stop()
		os.Remove(p.socket)
	})
	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(framework.Ctx(t), 30*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: name, ResourceName: fakeResource,
	}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("register the device plugin with the kubelet: %v", err)
	}
	return p
}

// cdiPod asks for one vendor.example/fake and shows what of it it got.
const cdiPod = `apiVersion: v1
kind: Pod
metadata:
  name: cdi
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: gpu
    image: registry.k8s.io/e2e-test-images/busybox:1.29-2
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo FAKE_GPU=$FAKE_GPU; sleep 3600"]
    resources:
      limits: {vendor.example/fake: 1}
`

// TestCDIDevicePlugin: the stock kubelet, a device plugin of the test's
// own that answers Allocate with a CDI name only, and berth with a CDI
// spec of that device: the pod's container has the device node and the
// spec's env and mount.
func TestCDIDevicePlugin(t *testing.T) {
	specDir, devDir, libDir := t.TempDir(), t.TempDir(), t.TempDir()
	var null unix.Stat_t
	if err := unix.Stat("/dev/null", &null); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(devDir, "fake0"), unix.S_IFCHR|0o666, int(null.Rdev)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(libDir, "libfake.so"), []byte("fake driver\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := fmt.Sprintf(`cdiVersion: "0.6.0"
kind: vendor.example/fake
devices:
  - name: gpu0
    containerEdits:
      env: ["FAKE_GPU=gpu0"]
      deviceNodes:
        - path: /dev/fake0
          hostPath: %s/fake0
      mounts:
        - hostPath: %s
          containerPath: /opt/fake
          options: [ro, bind]
`, devDir, libDir)
	if err := os.WriteFile(filepath.Join(specDir, "vendor.example-fake.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fmt.Sprintf("cdi_spec_dirs = [%q]\n", specDir))
	// A socket an earlier kubelet left would pass for this one's.
	os.Remove(pluginapi.KubeletSocket)
	k := e.startKubelet(kubeletOptions{})
	p := startFakeDevicePlugin(t)
	// A pod admitted before the kubelet has the plugin's devices fails
	// for good (static pods are not retried): wait until the kubelet
	// took the device list and checkpointed it.
	waitFor(t, time.Minute, "the kubelet to list the plugin's devices", func() (bool, string) {
		listed, _ := p.state()
		cp, _ := os.ReadFile(filepath.Join(pluginapi.DevicePluginPath, "kubelet_internal_checkpoint"))
		return listed && strings.Contains(string(cp), fakeResource), fmt.Sprintf("listed %v, checkpoint %q", listed, cp)
	})
	manifest := k.writeManifest("cdi", cdiPod)
	t.Cleanup(func() { os.Remove(manifest) })
	name := "cdi-" + e.nodeName
	pod := k.waitPod(t, name, 3*time.Minute, "Running", func(p *pod) bool {
		c := p.container("gpu")
		return p.Status.Phase == "Running" && c != nil && c.State.Running != nil
	})
	if _, alloc := p.state(); len(alloc) != 1 || len(alloc[0]) != 1 || alloc[0][0] != "gpu0" {
		t.Errorf("the plugin's Allocate calls: %v, want one of gpu0", alloc)
	}
	var id string
	for _, c := range e.podContainers(t, pod.Metadata.UID) {
		if c.Metadata.Name == "gpu" {
			id = c.Id
		}
	}
	if id == "" {
		t.Fatalf("berth has no container gpu of pod %s", name)
	}
	out := e.exec(t, id, "sh", "-c", "echo $FAKE_GPU; test -c /dev/fake0 && echo char; cat /opt/fake/libfake.so")
	if out != "gpu0\nchar\nfake driver\n" {
		t.Errorf("in the container: %q, want gpu0, a char device /dev/fake0 and the mounted driver file", out)
	}
	os.Remove(manifest)
	waitFor(t, 2*time.Minute, "the pod's stop", func() (bool, string) {
		for _, sb := range e.podSandboxes(t, pod.Metadata.UID) {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				return false, "sandbox " + sb.Id + " ready"
			}
		}
		return true, ""
	})
}
