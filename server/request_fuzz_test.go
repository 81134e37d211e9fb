package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/sandbox"
)

// fuzzLiveID is the one container and pod the fuzz services know: running,
// and ready.
const fuzzLiveID = "live"

// fuzzServices stand behind the server in FuzzRequest. They fail the test
// when a request reaches them that the server should have refused, and
// otherwise answer as the real services do: NotFound for unknown IDs, the
// pure validators (spec.Resources, spec.CheckImageMount,
// image.ParseReference) for the rest.
type fuzzServices struct {
	t *testing.T
}

func (f fuzzServices) found(id string, notFound error) error {
	// The pod RPCs refuse an empty ID in the server; the container
	// service answers NotFound for it itself (container.Service.lookup).
	if id == "" && notFound == sandbox.ErrNotFound {
		f.t.Fatalf("an empty pod ID reached the service")
	}
	if id != fuzzLiveID {
		return fmt.Errorf("%w: %q", notFound, id)
	}
	return nil
}

// Sandboxes.
func (f fuzzServices) Run(_ context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	md := cfg.GetMetadata()
	if md.GetName() == "" || md.GetNamespace() == "" || md.GetUid() == "" {
		f.t.Fatalf("RunPodSandbox accepted metadata %v", md)
	}
	if _, ok := config.Default().Handler(handler); !ok {
		f.t.Fatalf("RunPodSandbox accepted handler %q", handler)
	}
	if sc := cfg.GetLinux().GetSecurityContext(); sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil {
		f.t.Fatal("RunPodSandbox accepted run_as_group without run_as_user")
	}
	if _, err := spec.UserNamespace(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(), "x"); err != nil {
		f.t.Fatalf("RunPodSandbox accepted a bad user namespace: %v", err)
	}
	return "new", nil
}
func (f fuzzServices) Stop(_ context.Context, id string) error {
	return f.found(id, sandbox.ErrNotFound)
}
func (f fuzzServices) Remove(_ context.Context, id string) error {
	return f.found(id, sandbox.ErrNotFound)
}
func (f fuzzServices) Status(_ context.Context, id string, _ bool) (*runtimeapi.PodSandboxStatus, map[string]string, error) {
	if err := f.found(id, sandbox.ErrNotFound); err != nil {
		return nil, nil, err
	}
	return &runtimeapi.PodSandboxStatus{Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY}, nil, nil
}
func (f fuzzServices) List(context.Context, *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	return nil
}
func (f fuzzServices) UpdatePodCIDR(context.Context, string) error { return nil }

// fuzzContainers is the container service (its method names clash with
// the sandbox service's).
type fuzzContainers struct{ fuzzServices }

func (f fuzzContainers) Create(_ context.Context, podID string, cfg *runtimeapi.ContainerConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	if podID == "" {
		f.t.Fatal("CreateContainer accepted an empty pod_sandbox_id")
	}
	if err := f.found(podID, container.ErrNotFound); err != nil {
		return "", err
	}
	for i, m := range cfg.GetMounts() {
		if spec.IsImageMount(m) {
			if err := spec.CheckImageMount(fmt.Sprintf("config.mounts[%d]", i), m); err != nil {
				return "", fmt.Errorf("%w: %w", container.ErrInvalid, err)
			}
		}
	}
	return "new", nil
}
func (f fuzzContainers) Start(_ context.Context, id string) error {
	return f.found(id, container.ErrNotFound)
}
func (f fuzzContainers) Stop(_ context.Context, id string, timeout time.Duration) error {
	if timeout < 0 {
		f.t.Fatalf("StopContainer accepted timeout %v", timeout)
	}
	return f.found(id, container.ErrNotFound)
}
func (f fuzzContainers) Remove(_ context.Context, id string) error {
	return f.found(id, container.ErrNotFound)
}
func (f fuzzContainers) Status(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatus, map[string]string, error) {
	if err := f.found(id, container.ErrNotFound); err != nil {
		return nil, nil, err
	}
	return &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING}, nil, nil
}
func (f fuzzContainers) List(context.Context, *runtimeapi.ContainerFilter) []*runtimeapi.Container {
	return nil
}
func (f fuzzContainers) PodStatuses(context.Context, string) []*runtimeapi.ContainerStatus {
	return nil
}
func (f fuzzContainers) ExecSync(_ context.Context, id string, cmd []string, timeout time.Duration) (*container.ExecResult, error) {
	if len(cmd) == 0 || timeout < 0 {
		f.t.Fatalf("ExecSync accepted cmd %q timeout %v", cmd, timeout)
	}
	if err := f.found(id, container.ErrNotFound); err != nil {
		return nil, err
	}
	return &container.ExecResult{}, nil
}
func (f fuzzContainers) ReopenLog(_ context.Context, id string) error {
	return f.found(id, container.ErrNotFound)
}
func (f fuzzContainers) UpdateResources(_ context.Context, id string, r *runtimeapi.LinuxContainerResources) error {
	if err := f.found(id, container.ErrNotFound); err != nil {
		return err
	}
	if r == nil {
		return nil
	}
	if err := spec.Resources(&specs.LinuxResources{}, r, true, "linux"); err != nil {
		return fmt.Errorf("%w: %w", container.ErrInvalid, err)
	}
	return nil
}
func (f fuzzContainers) Checkpoint(_ context.Context, id, location string, timeout time.Duration) error {
	if !filepath.IsAbs(location) || timeout < 0 {
		f.t.Fatalf("CheckpointContainer accepted location %q timeout %v", location, timeout)
	}
	return f.found(id, container.ErrNotFound)
}
func (f fuzzContainers) CheckpointPod(_ context.Context, podID, dir string, ids []string) error {
	if podID == "" {
		f.t.Fatal("CheckpointPod accepted an empty pod_sandbox_id")
	}
	return f.found(podID, container.ErrNotFound)
}
func (f fuzzContainers) CheckRestore(dir string) error {
	if !filepath.IsAbs(dir) {
		f.t.Fatalf("RestorePod accepted checkpoint_path %q", dir)
	}
	return nil
}

// fuzzImages is the image service.
type fuzzImages struct{ fuzzServices }

func (f fuzzImages) Pull(_ context.Context, ref string, _ *image.AuthConfig) (string, error) {
	if ref == "" {
		f.t.Fatal("PullImage accepted an empty reference")
	}
	if _, err := image.ParseReference(ref); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: %s", image.ErrNotFound, ref)
}
func (f fuzzImages) Status(ref string) (image.Image, error) {
	if ref == "" {
		f.t.Fatal("ImageStatus accepted an empty reference")
	}
	return image.Image{}, image.ErrNotFound
}
func (f fuzzImages) List(string) []image.Image { return nil }
func (f fuzzImages) Remove(_ context.Context, ref string) error {
	if ref == "" {
		f.t.Fatal("RemoveImage accepted an empty reference")
	}
	return nil
}
func (f fuzzImages) FsInfo() image.FsUsage { return image.FsUsage{} }

// fuzzStreams hands out URLs for whatever reached it.
type fuzzStreams struct{ fuzzServices }

func (f fuzzStreams) GetExec(r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if r.GetContainerId() != fuzzLiveID {
		f.t.Fatalf("Exec into %q, not a running container", r.GetContainerId())
	}
	return &runtimeapi.ExecResponse{Url: "http://127.0.0.1/exec/x"}, nil
}
func (f fuzzStreams) GetAttach(r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if r.GetContainerId() != fuzzLiveID {
		f.t.Fatalf("Attach to %q, not a running container", r.GetContainerId())
	}
	return &runtimeapi.AttachResponse{Url: "http://127.0.0.1/attach/x"}, nil
}
func (f fuzzStreams) GetPortForward(r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if r.GetPodSandboxId() != fuzzLiveID {
		f.t.Fatalf("PortForward into %q, not a ready pod", r.GetPodSandboxId())
	}
	return &runtimeapi.PortForwardResponse{Url: "http://127.0.0.1/portforward/x"}, nil
}

// fuzzRPC is one request type and the handler that serves it.
type fuzzRPC struct {
	name string
	req  func() proto.Message
	call func(context.Context, *Server, proto.Message) (any, error)
}

func rpc[Req proto.Message, Resp any](name string, newReq func() Req, h func(*Server, context.Context, Req) (Resp, error)) fuzzRPC {
	return fuzzRPC{
		name: name,
		req:  func() proto.Message { return newReq() },
		call: func(ctx context.Context, s *Server, m proto.Message) (any, error) { return h(s, ctx, m.(Req)) },
	}
}

var fuzzRPCs = []fuzzRPC{
	rpc("RunPodSandbox", func() *runtimeapi.RunPodSandboxRequest { return &runtimeapi.RunPodSandboxRequest{} }, (*Server).RunPodSandbox),
	rpc("StopPodSandbox", func() *runtimeapi.StopPodSandboxRequest { return &runtimeapi.StopPodSandboxRequest{} }, (*Server).StopPodSandbox),
	rpc("RemovePodSandbox", func() *runtimeapi.RemovePodSandboxRequest { return &runtimeapi.RemovePodSandboxRequest{} }, (*Server).RemovePodSandbox),
	rpc("PodSandboxStatus", func() *runtimeapi.PodSandboxStatusRequest { return &runtimeapi.PodSandboxStatusRequest{} }, (*Server).PodSandboxStatus),
	rpc("ListPodSandbox", func() *runtimeapi.ListPodSandboxRequest { return &runtimeapi.ListPodSandboxRequest{} }, (*Server).ListPodSandbox),
	rpc("UpdatePodSandboxResources", func() *runtimeapi.UpdatePodSandboxResourcesRequest {
		return &runtimeapi.UpdatePodSandboxResourcesRequest{}
	}, (*Server).UpdatePodSandboxResources),
	rpc("CreateContainer", func() *runtimeapi.CreateContainerRequest { return &runtimeapi.CreateContainerRequest{} }, (*Server).CreateContainer),
	rpc("StartContainer", func() *runtimeapi.StartContainerRequest { return &runtimeapi.StartContainerRequest{} }, (*Server).StartContainer),
	rpc("StopContainer", func() *runtimeapi.StopContainerRequest { return &runtimeapi.StopContainerRequest{} }, (*Server).StopContainer),
	rpc("RemoveContainer", func() *runtimeapi.RemoveContainerRequest { return &runtimeapi.RemoveContainerRequest{} }, (*Server).RemoveContainer),
	rpc("ContainerStatus", func() *runtimeapi.ContainerStatusRequest { return &runtimeapi.ContainerStatusRequest{} }, (*Server).ContainerStatus),
	rpc("ListContainers", func() *runtimeapi.ListContainersRequest { return &runtimeapi.ListContainersRequest{} }, (*Server).ListContainers),
	rpc("UpdateContainerResources", func() *runtimeapi.UpdateContainerResourcesRequest {
		return &runtimeapi.UpdateContainerResourcesRequest{}
	}, (*Server).UpdateContainerResources),
	rpc("ReopenContainerLog", func() *runtimeapi.ReopenContainerLogRequest { return &runtimeapi.ReopenContainerLogRequest{} }, (*Server).ReopenContainerLog),
	rpc("ExecSync", func() *runtimeapi.ExecSyncRequest { return &runtimeapi.ExecSyncRequest{} }, (*Server).ExecSync),
	rpc("Exec", func() *runtimeapi.ExecRequest { return &runtimeapi.ExecRequest{} }, (*Server).Exec),
	rpc("Attach", func() *runtimeapi.AttachRequest { return &runtimeapi.AttachRequest{} }, (*Server).Attach),
	rpc("PortForward", func() *runtimeapi.PortForwardRequest { return &runtimeapi.PortForwardRequest{} }, (*Server).PortForward),
	rpc("PullImage", func() *runtimeapi.PullImageRequest { return &runtimeapi.PullImageRequest{} }, (*Server).PullImage),
	rpc("ImageStatus", func() *runtimeapi.ImageStatusRequest { return &runtimeapi.ImageStatusRequest{} }, (*Server).ImageStatus),
	rpc("ListImages", func() *runtimeapi.ListImagesRequest { return &runtimeapi.ListImagesRequest{} }, (*Server).ListImages),
	rpc("RemoveImage", func() *runtimeapi.RemoveImageRequest { return &runtimeapi.RemoveImageRequest{} }, (*Server).RemoveImage),
	rpc("UpdateRuntimeConfig", func() *runtimeapi.UpdateRuntimeConfigRequest { return &runtimeapi.UpdateRuntimeConfigRequest{} }, (*Server).UpdateRuntimeConfig),
	rpc("CheckpointContainer", func() *runtimeapi.CheckpointContainerRequest {
		return &runtimeapi.CheckpointContainerRequest{}
	}, (*Server).CheckpointContainer),
	rpc("CheckpointPod", func() *runtimeapi.CheckpointPodRequest { return &runtimeapi.CheckpointPodRequest{} }, (*Server).CheckpointPod),
	rpc("RestorePod", func() *runtimeapi.RestorePodRequest { return &runtimeapi.RestorePodRequest{} }, (*Server).RestorePod),
}

// FuzzRequest decodes fuzzed bytes as the request of one RPC (chosen by
// the first byte), as the gRPC server would, and serves it. The handler
// must not panic; a request the server refuses is refused with
// InvalidArgument, NotFound or FailedPrecondition (Unimplemented where
// this server lacks a feature) and a message; and the fuzz services behind
// it fail the test when a request that should have been refused reaches
// them (empty IDs, no command, negative timeouts, pod metadata missing).
func FuzzRequest(f *testing.F) {
	seeds := map[string]proto.Message{
		"RunPodSandbox": &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u1"},
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				RunAsGroup: &runtimeapi.Int64Value{Value: 5},
				NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{
					Mode: runtimeapi.NamespaceMode_POD,
					Uids: []*runtimeapi.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}},
				}},
			}},
		}, RuntimeHandler: "runc"},
		"CreateContainer": &runtimeapi.CreateContainerRequest{PodSandboxId: fuzzLiveID, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Mounts: []*runtimeapi.Mount{{ContainerPath: "/iv", Image: &runtimeapi.ImageSpec{Image: "busybox"}, ImageSubPath: "../etc"}},
		}},
		"StopContainer":             &runtimeapi.StopContainerRequest{ContainerId: fuzzLiveID, Timeout: -1},
		"ExecSync":                  &runtimeapi.ExecSyncRequest{ContainerId: fuzzLiveID, Cmd: []string{"true"}, Timeout: 3},
		"Exec":                      &runtimeapi.ExecRequest{ContainerId: fuzzLiveID, Cmd: []string{"sh"}, Tty: true, Stdin: true},
		"Attach":                    &runtimeapi.AttachRequest{ContainerId: "gone", Stdout: true},
		"PortForward":               &runtimeapi.PortForwardRequest{PodSandboxId: fuzzLiveID, Port: []int32{80, -1, 70000}},
		"PullImage":                 &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.10"}, Auth: &runtimeapi.AuthConfig{Username: "u"}},
		"ListContainers":            &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "l", State: &runtimeapi.ContainerStateValue{State: 7}, LabelSelector: map[string]string{"": ""}}},
		"ListPodSandbox":            &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"a": "b"}}},
		"ListImages":                &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "busybox"}}},
		"UpdatePodSandboxResources": &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: fuzzLiveID, Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2}},
		"UpdateContainerResources": &runtimeapi.UpdateContainerResourcesRequest{ContainerId: fuzzLiveID, Linux: &runtimeapi.LinuxContainerResources{
			CpuQuota: -5, CpuPeriod: 1, MemoryLimitInBytes: -1, CpusetCpus: "0-x", Unified: map[string]string{"../x": "1"},
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 1}},
		}},
		"CheckpointContainer": &runtimeapi.CheckpointContainerRequest{ContainerId: fuzzLiveID, Location: "rel/ckpt.tar", Timeout: -3},
		"CheckpointPod":       &runtimeapi.CheckpointPodRequest{PodSandboxId: fuzzLiveID, OutputPath: "/nonexistent/ckpt", ContainerIds: []string{fuzzLiveID, fuzzLiveID}, Options: map[string]string{"k": "v"}},
		"RestorePod": &runtimeapi.RestorePodRequest{CheckpointPath: "/nonexistent/ckpt", Config: &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u2"},
		}, ContainerConfigs: []*runtimeapi.ContainerConfig{{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}}}},
		"UpdateRuntimeConfig": &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.0.0.0/24"}}},
	}
	for i, r := range fuzzRPCs {
		msg := seeds[r.name]
		if msg == nil {
			msg = r.req()
		}
		b, err := proto.Marshal(msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i), b)
	}
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		r := fuzzRPCs[int(which)%len(fuzzRPCs)]
		req := r.req()
		if err := proto.Unmarshal(data, req); err != nil {
			t.Skip()
		}
		svc := fuzzServices{t: t}
		s, _ := newTestServer(t, func(o *Options) {
			o.Sandboxes = svc
			o.Containers = fuzzContainers{svc}
			o.Images = fuzzImages{svc}
			o.Streams = fuzzStreams{svc}
		})
		_, err := r.call(context.Background(), s, req)
		if err == nil {
			return
		}
		st, ok := status.FromError(err)
		if !ok {
			t.Fatalf("%s: not a gRPC status: %v", r.name, err)
		}
		switch st.Code() {
		case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.Unimplemented:
		default:
			t.Fatalf("%s: code %s: %s", r.name, st.Code(), st.Message())
		}
		if st.Message() == "" {
			t.Fatalf("%s: %s without a message", r.name, st.Code())
		}
	})
}
