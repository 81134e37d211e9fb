package server

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/image"
)

// restoreServices records what a RestorePod made and undid; a container
// named "broken" fails to be created.
type restoreServices struct {
	fuzzServices
	calls *[]string
}

func (r restoreServices) Run(context.Context, *runtimeapi.PodSandboxConfig, string) (string, error) {
	*r.calls = append(*r.calls, "run pod")
	return "pod2", nil
}
func (r restoreServices) Stop(_ context.Context, id string) error {
	*r.calls = append(*r.calls, "stop "+id)
	return nil
}
func (r restoreServices) Remove(_ context.Context, id string) error {
	*r.calls = append(*r.calls, "remove "+id)
	return nil
}

// restoreContainers records what a RestorePod created and removed; with
// noCRIU it is a host where CRIU does not work, whose creates from an
// archive answer as the container service's do.
type restoreContainers struct {
	fuzzContainers
	calls  *[]string
	noCRIU bool
}

func (r restoreContainers) Create(_ context.Context, podID string, cfg *runtimeapi.ContainerConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	name := cfg.GetMetadata().GetName()
	if r.noCRIU {
		return "", container.ErrCheckpointUnavailable
	}
	if name == "broken" {
		return "", errors.New("disk full")
	}
	*r.calls = append(*r.calls, "create "+name+" in "+podID+" from "+filepath.Base(cfg.GetImage().GetImage()))
	return "id-" + name, nil
}
func (r restoreContainers) CheckRestore(string) error {
	if r.noCRIU {
		return container.ErrCheckpointUnavailable
	}
	return nil
}
func (r restoreContainers) Remove(_ context.Context, id string) error {
	*r.calls = append(*r.calls, "remove "+id)
	return nil
}

// restoreImages has busybox, the image of every checkpointed container.
type restoreImages struct{ fuzzImages }

func (restoreImages) Status(ref string) (image.Image, error) {
	if ref == "busybox" || ref == "sha256:1234" {
		return image.Image{ID: "sha256:1234", RepoTags: []string{"busybox:latest"}}, nil
	}
	if ref == "nginx" {
		return image.Image{ID: "sha256:5678"}, nil
	}
	return image.Image{}, image.ErrNotFound
}

// writePodCheckpoint writes a pod checkpoint of the containers names
// into a new directory.
func writePodCheckpoint(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	var entries []string
	for _, n := range names {
		f, err := os.Create(filepath.Join(dir, n+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		tw := tar.NewWriter(f)
		for name, body := range map[string]string{
			"config.dump":                 `{"id":"x","name":"` + n + `","rootfsImage":"busybox:latest","rootfsImageRef":"sha256:1234"}`,
			"spec.dump":                   `{"ociVersion":"1.2.0"}`,
			"checkpoint/inventory.img":    "inv",
			"checkpoint/descriptors.json": "[]",
		} {
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(body))})
			tw.Write([]byte(body))
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		entries = append(entries, `{"name":"`+n+`","id":"x","archive":"`+n+`.tar","image":"sha256:1234"}`)
	}
	manifest := `{"version":1,"podId":"pod1","containers":[` + strings.Join(entries, ",") + `]}`
	if err := os.WriteFile(filepath.Join(dir, "pod.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRestorePodRequests(t *testing.T) {
	ckpt := writePodCheckpoint(t, "a", "b")
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u2"}}
	ctr := func(name, image string) *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: image}}
	}
	req := func(change func(*runtimeapi.RestorePodRequest)) *runtimeapi.RestorePodRequest {
		r := &runtimeapi.RestorePodRequest{CheckpointPath: ckpt, Config: podCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{ctr("b", "busybox"), ctr("a", "sha256:1234")}}
		r = proto.Clone(r).(*runtimeapi.RestorePodRequest)
		if change != nil {
			change(r)
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		req   *runtimeapi.RestorePodRequest
		code  codes.Code
		want  string   // a part of the error
		calls []string // what the services were asked, in order
	}{
		{"both containers", req(nil), codes.OK, "", []string{"run pod", "create b in pod2 from b.tar", "create a in pod2 from a.tar"}},
		{"options", req(func(r *runtimeapi.RestorePodRequest) { r.Options = map[string]string{"tcp": "yes"} }), codes.InvalidArgument, "options: berth takes none; got tcp", nil},
		{"no pod config", req(func(r *runtimeapi.RestorePodRequest) { r.Config = nil }), codes.InvalidArgument, "config is required", nil},
		{"unknown handler", req(func(r *runtimeapi.RestorePodRequest) { r.RuntimeHandler = "kata" }), codes.InvalidArgument, `runtime_handler "kata"`, nil},
		{"no container configs", req(func(r *runtimeapi.RestorePodRequest) { r.ContainerConfigs = nil }), codes.InvalidArgument, "container_configs: empty", nil},
		{"relative path", req(func(r *runtimeapi.RestorePodRequest) { r.CheckpointPath = "ckpt" }), codes.InvalidArgument, "not an absolute path", nil},
		{"not a checkpoint", req(func(r *runtimeapi.RestorePodRequest) { r.CheckpointPath = t.TempDir() }), codes.InvalidArgument, "is not a pod checkpoint", nil},
		{"a name not checkpointed", req(func(r *runtimeapi.RestorePodRequest) { r.ContainerConfigs[1] = ctr("c", "busybox") }), codes.InvalidArgument, `no container named "c"`, nil},
		{"a container left out", req(func(r *runtimeapi.RestorePodRequest) { r.ContainerConfigs = r.ContainerConfigs[:1] }), codes.InvalidArgument, "1 configs for the checkpoint's 2", nil},
		{"a name twice", req(func(r *runtimeapi.RestorePodRequest) { r.ContainerConfigs[1] = ctr("b", "busybox") }), codes.InvalidArgument, `name "b" is given twice`, nil},
		{"no image", req(func(r *runtimeapi.RestorePodRequest) { r.ContainerConfigs[0].Image = nil }), codes.InvalidArgument, "config.image.image: missing", nil},
		{"another image", req(func(r *runtimeapi.RestorePodRequest) { r.ContainerConfigs[1] = ctr("a", "nginx") }), codes.InvalidArgument, `is not container "a"'s image`, nil},
		{"an image not here", req(func(r *runtimeapi.RestorePodRequest) { r.ContainerConfigs[1] = ctr("a", "redis") }), codes.NotFound, "image redis", nil},
		{"a create fails", req(func(r *runtimeapi.RestorePodRequest) {
			// The failing container comes second, after one was made.
			r.CheckpointPath = writePodCheckpoint(t, "a", "broken")
			r.ContainerConfigs = []*runtimeapi.ContainerConfig{ctr("a", "busybox"), ctr("broken", "busybox")}
		}), codes.Unknown, `container "broken": disk full`, []string{"run pod", "create a in pod2 from a.tar", "remove id-a", "stop pod2", "remove pod2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			s, _ := newTestServer(t, func(o *Options) {
				o.Sandboxes = restoreServices{fuzzServices{t: t}, &calls}
				o.Containers = restoreContainers{fuzzContainers{fuzzServices{t: t}}, &calls, false}
				o.Images = restoreImages{fuzzImages{fuzzServices{t: t}}}
			})
			resp, err := s.RestorePod(context.Background(), tc.req)
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("RestorePod: %v, want %s with %q", err, tc.code, tc.want)
			}
			if !slices.Equal(calls, tc.calls) {
				t.Errorf("services were asked %q, want %q", calls, tc.calls)
			}
			if err == nil {
				want := []*runtimeapi.RestoredContainer{{Name: "b", ContainerId: "id-b"}, {Name: "a", ContainerId: "id-a"}}
				if resp.PodSandboxId != "pod2" || len(resp.RestoredContainers) != 2 || !proto.Equal(resp.RestoredContainers[0], want[0]) || !proto.Equal(resp.RestoredContainers[1], want[1]) {
					t.Errorf("RestorePod answered %v", resp)
				}
			}
		})
	}
}

// Where CRIU does not work, a RestorePod answers as CheckpointContainer
// does before it makes anything: no pod is run (no CNI ADD), no container
// created, nothing undone. A bad request is still refused for what is
// wrong with it.
func TestRestorePodWithoutCRIU(t *testing.T) {
	ckpt := writePodCheckpoint(t, "a", "b")
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u2"}}
	ctr := func(name string) *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "busybox"}}
	}
	for _, tc := range []struct {
		name string
		cfgs []*runtimeapi.ContainerConfig
		code codes.Code
		want string // the whole message
	}{
		{"a good request", []*runtimeapi.ContainerConfig{ctr("a"), ctr("b")}, codes.Unknown, "checkpoint/restore support not available"},
		{"a bad request", []*runtimeapi.ContainerConfig{ctr("a")}, codes.InvalidArgument, `container_configs: 1 configs for the checkpoint's 2 containers ("a", "b")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			s, _ := newTestServer(t, func(o *Options) {
				o.Sandboxes = restoreServices{fuzzServices{t: t}, &calls}
				o.Containers = restoreContainers{fuzzContainers{fuzzServices{t: t}}, &calls, true}
				o.Images = restoreImages{fuzzImages{fuzzServices{t: t}}}
			})
			_, err := s.RestorePod(context.Background(), &runtimeapi.RestorePodRequest{CheckpointPath: ckpt, Config: podCfg, ContainerConfigs: tc.cfgs})
			if st := status.Convert(err); st.Code() != tc.code || st.Message() != tc.want {
				t.Errorf("RestorePod: %v, want %s %q", err, tc.code, tc.want)
			}
			if len(calls) != 0 {
				t.Errorf("services were asked %q, want nothing made", calls)
			}
		})
	}
}

func TestCheckpointPodRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *runtimeapi.CheckpointPodRequest
		code codes.Code
		want string
	}{
		{"reaches the service", &runtimeapi.CheckpointPodRequest{PodSandboxId: fuzzLiveID, OutputPath: "/ckpt", ContainerIds: []string{"c"}}, codes.OK, ""},
		{"unknown pod", &runtimeapi.CheckpointPodRequest{PodSandboxId: "gone", OutputPath: "/ckpt", ContainerIds: []string{"c"}}, codes.NotFound, "gone"},
		{"no pod", &runtimeapi.CheckpointPodRequest{OutputPath: "/ckpt", ContainerIds: []string{"c"}}, codes.InvalidArgument, "pod_sandbox_id is required"},
		{"options", &runtimeapi.CheckpointPodRequest{PodSandboxId: fuzzLiveID, OutputPath: "/ckpt", Options: map[string]string{"b": "1", "a": "2"}}, codes.InvalidArgument, "got a, b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t, func(o *Options) { o.Containers = fuzzContainers{fuzzServices{t: t}} })
			_, err := s.CheckpointPod(context.Background(), tc.req)
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("CheckpointPod: %v, want %s with %q", err, tc.code, tc.want)
			}
		})
	}
	if _, err := new(Server).CheckpointPod(context.Background(), &runtimeapi.CheckpointPodRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("CheckpointPod without a container service: %v", err)
	}
}
