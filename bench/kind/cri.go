package kind

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criResult is what `bench kind cri` prints (JSON): the pod start times,
// RunPodSandbox + CreateContainer + StartContainer, in milliseconds.
type criResult struct {
	StartMS []float64 `json:"start_ms"`
}

// runCRI is `bench kind cri`, run inside a node: it starts and tears down
// -n pods one at a time through the node's CRI socket, as the kubelet
// would (a sandbox, one container of -image with its own entrypoint, a
// systemd slice as cgroup parent: both runtimes use the systemd driver in
// a node), and prints each start's time.
func runCRI(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench kind cri", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "/run/containerd/containerd.sock", "the CRI socket (both node images serve it there)")
	image := fs.String("image", "registry.k8s.io/pause:3.10.2", "the container's image, present in the node")
	n := fs.Int("n", 20, "pods timed")
	warmup := fs.Int("warmup", 2, "pods started and removed before timing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial %s: %w", *endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	var res criResult
	for i := 0; i < *warmup+*n; i++ {
		d, err := podOnce(ctx, rt, *image, i)
		if err != nil {
			return err
		}
		if i >= *warmup {
			res.StartMS = append(res.StartMS, float64(d.Microseconds())/1000)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// podOnce starts one pod, times its start, and removes it.
func podOnce(ctx context.Context, rt runtimeapi.RuntimeServiceClient, image string, i int) (time.Duration, error) {
	b := make([]byte, 8)
	rand.Read(b)
	uid := hex.EncodeToString(b)
	name := fmt.Sprintf("kindbench-%d", i)
	logDir := "/var/log/pods/kindbench_" + name + "_" + uid
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(logDir)
	ns := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
	sc := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "kindbench", Uid: uid},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       map[string]string{"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "kindbench", "io.kubernetes.pod.uid": uid},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    "kindbench-pod" + uid + ".slice",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns},
		},
	}
	cc := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		LogPath:  "c/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       &runtimeapi.LinuxContainerResources{CpuShares: 2, OomScoreAdj: 1000},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns},
		},
	}
	t0 := time.Now()
	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sc})
	if err != nil {
		return 0, fmt.Errorf("RunPodSandbox %s: %w", name, err)
	}
	id := run.PodSandboxId
	remove := func() error {
		_, err1 := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		_, err2 := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return errors.Join(err1, err2)
	}
	cr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: cc, SandboxConfig: sc})
	if err != nil {
		return 0, errors.Join(fmt.Errorf("CreateContainer in %s: %w", name, err), remove())
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		return 0, errors.Join(fmt.Errorf("StartContainer in %s: %w", name, err), remove())
	}
	d := time.Since(t0)
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		return 0, errors.Join(fmt.Errorf("StopContainer in %s: %w", name, err), remove())
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		return 0, errors.Join(fmt.Errorf("RemoveContainer in %s: %w", name, err), remove())
	}
	if err := remove(); err != nil {
		return 0, fmt.Errorf("remove pod %s: %w", name, err)
	}
	return d, nil
}
