package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/sandbox"
)

// fakeSandboxes fails every call with err and records what reached it.
type fakeSandboxes struct {
	err   error
	calls []string
	cidr  string
}

func (f *fakeSandboxes) Run(_ context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	f.calls = append(f.calls, "run")
	return "pod1", f.err
}
func (f *fakeSandboxes) Stop(context.Context, string) error {
	f.calls = append(f.calls, "stop")
	return f.err
}
func (f *fakeSandboxes) Remove(context.Context, string) error {
	f.calls = append(f.calls, "remove")
	return f.err
}
func (f *fakeSandboxes) Status(context.Context, string, bool) (*runtimeapi.PodSandboxStatus, map[string]string, error) {
	f.calls = append(f.calls, "status")
	return &runtimeapi.PodSandboxStatus{Id: "pod1"}, nil, f.err
}
func (f *fakeSandboxes) List(context.Context, *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	return nil
}
func (f *fakeSandboxes) UpdatePodCIDR(_ context.Context, cidr string) error {
	f.cidr = cidr
	return f.err
}

func goodConfig() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "n", Namespace: "ns", Uid: "u"}}
}

func withSecurity(sc *runtimeapi.LinuxSandboxSecurityContext) *runtimeapi.PodSandboxConfig {
	c := goodConfig()
	c.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: sc}
	return c
}

func TestRunPodSandboxValidation(t *testing.T) {
	tests := []struct {
		name     string
		req      *runtimeapi.RunPodSandboxRequest
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "no config", req: &runtimeapi.RunPodSandboxRequest{}, wantCode: codes.InvalidArgument, wantMsg: "config"},
		{name: "no metadata", req: &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}}, wantCode: codes.InvalidArgument, wantMsg: "config.metadata"},
		{name: "no name", req: &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "ns", Uid: "u"}}}, wantCode: codes.InvalidArgument, wantMsg: "config.metadata.name"},
		{name: "no namespace", req: &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "n", Uid: "u"}}}, wantCode: codes.InvalidArgument, wantMsg: "config.metadata.namespace"},
		{name: "no uid", req: &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "n", Namespace: "ns"}}}, wantCode: codes.InvalidArgument, wantMsg: "config.metadata.uid"},
		{name: "unknown handler", req: &runtimeapi.RunPodSandboxRequest{Config: goodConfig(), RuntimeHandler: "kata"}, wantCode: codes.InvalidArgument,
			wantMsg: `runtime_handler "kata" is not configured: this berth's handlers are "" (the default, "runc"'s settings), "berth", "runc"`},
		{name: "runc handler", req: &runtimeapi.RunPodSandboxRequest{Config: goodConfig(), RuntimeHandler: "runc"}, wantCode: codes.OK},
		{name: "default handler", req: &runtimeapi.RunPodSandboxRequest{Config: goodConfig()}, wantCode: codes.OK},
		{name: "run_as_group without run_as_user", req: &runtimeapi.RunPodSandboxRequest{Config: withSecurity(&runtimeapi.LinuxSandboxSecurityContext{
			RunAsGroup: &runtimeapi.Int64Value{Value: 7}})}, wantCode: codes.InvalidArgument, wantMsg: "config.linux.security_context.run_as_group"},
		{name: "run_as_group with run_as_user", req: &runtimeapi.RunPodSandboxRequest{Config: withSecurity(&runtimeapi.LinuxSandboxSecurityContext{
			RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 7}})}, wantCode: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeSandboxes{}
			s, _ := newTestServer(t, func(o *Options) { o.Sandboxes = fake })
			resp, err := s.RunPodSandbox(context.Background(), tt.req)
			st := status.Convert(err)
			if st.Code() != tt.wantCode || !strings.Contains(st.Message(), tt.wantMsg) {
				t.Fatalf("= %v, want %v mentioning %q", err, tt.wantCode, tt.wantMsg)
			}
			if tt.wantCode != codes.OK && len(fake.calls) > 0 {
				t.Error("an invalid request reached the sandbox service")
			}
			if tt.wantCode == codes.OK && resp.GetPodSandboxId() != "pod1" {
				t.Errorf("id = %q", resp.GetPodSandboxId())
			}
		})
	}
}

// TestRunPodSandboxUserNamespace: a pod's user namespace option is
// checked (InvalidArgument naming the field), and a valid one reaches the
// sandbox service only where berth supports user namespaces.
func TestRunPodSandboxUserNamespace(t *testing.T) {
	m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 1 << 20, Length: 65536}}
	withUserNS := func(o *runtimeapi.NamespaceOption) *runtimeapi.PodSandboxConfig {
		return withSecurity(&runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: o})
	}
	pod := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
	tests := []struct {
		name      string
		cfg       *runtimeapi.PodSandboxConfig
		supported bool
		want      codes.Code
	}{
		{"no option", withUserNS(&runtimeapi.NamespaceOption{}), false, codes.OK},
		{"node", withUserNS(&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}), false, codes.OK},
		{"pod, supported", withUserNS(&runtimeapi.NamespaceOption{UsernsOptions: pod}), true, codes.OK},
		{"pod, unsupported", withUserNS(&runtimeapi.NamespaceOption{UsernsOptions: pod}), false, codes.Unimplemented},
		{"container mode", withUserNS(&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}}), true, codes.InvalidArgument},
		{"two mappings", withUserNS(&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: append(m, m[0]), Gids: m}}), true, codes.InvalidArgument},
		{"host network", withUserNS(&runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, UsernsOptions: pod}), true, codes.OK},
		{"host IPC", withUserNS(&runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE, UsernsOptions: pod}), true, codes.InvalidArgument},
		{"pod, handler disables them", withUserNS(&runtimeapi.NamespaceOption{UsernsOptions: pod}), true, codes.Unimplemented},
		{"node, handler disables them", withUserNS(&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}), true, codes.OK},
	}
	cfg, err := config.Parse("[runtimes.no-userns]\ndisable_user_namespaces = true")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeSandboxes{}
			s, _ := newTestServer(t, func(o *Options) { o.Sandboxes = fake; o.UserNamespaces = tt.supported; o.Config = cfg })
			handler := ""
			if strings.Contains(tt.name, "handler disables") {
				handler = "no-userns"
			}
			_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: tt.cfg, RuntimeHandler: handler})
			if st := status.Convert(err); st.Code() != tt.want || (tt.want != codes.OK && !strings.Contains(st.Message(), "userns_options")) {
				t.Fatalf("= %v, want %v naming userns_options", err, tt.want)
			}
			if tt.want != codes.OK && len(fake.calls) > 0 {
				t.Error("a refused request reached the sandbox service")
			}
		})
	}
}

func TestSandboxErrorCodes(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("pod x: %w", sandbox.ErrNotFound), codes.NotFound},
		{fmt.Errorf("pod x: %w: bad sysctl", sandbox.ErrInvalid), codes.InvalidArgument},
		{fmt.Errorf("pod sandbox %w", &idindex.AmbiguousError{Prefix: "0", IDs: []string{"0a", "0b"}}), codes.InvalidArgument},
		{fmt.Errorf("pod x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("pod x: pause: pid 7: %w: still running 5s after SIGKILL: 7 (ls) D", sandbox.ErrStuck), codes.DeadlineExceeded},
		{fmt.Errorf("%w: n_ns_u_0 is held by pod sandbox x, whose create failed", reserve.ErrTaken), codes.AlreadyExists},
		{errors.New("plugin type=\"bridge\" failed (add): boom"), codes.Unknown},
	}
	for _, tt := range tests {
		fake := &fakeSandboxes{err: tt.err}
		s, _ := newTestServer(t, func(o *Options) { o.Sandboxes = fake })
		ctx := context.Background()
		_, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "x"})
		if got := status.Code(err); got != tt.want {
			t.Errorf("Status with %v: code %v, want %v", tt.err, got, tt.want)
		}
		_, err = s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: goodConfig()})
		if got := status.Code(err); got != tt.want || !strings.Contains(status.Convert(err).Message(), tt.err.Error()) {
			t.Errorf("Run with %v: %v, want %v with the message", tt.err, err, tt.want)
		}
	}
}

func TestSandboxIDRequired(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.Sandboxes = &fakeSandboxes{} })
	ctx := context.Background()
	_, err1 := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{})
	_, err2 := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{})
	_, err3 := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{})
	for _, err := range []error{err1, err2, err3} {
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pod_sandbox_id") {
			t.Errorf("empty id: %v", err)
		}
	}
}

func TestUpdateRuntimeConfig(t *testing.T) {
	fake := &fakeSandboxes{}
	s, _ := newTestServer(t, func(o *Options) { o.Sandboxes = fake })
	req := &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.244.1.0/24"}}}
	if _, err := s.UpdateRuntimeConfig(context.Background(), req); err != nil || fake.cidr != "10.244.1.0/24" {
		t.Fatalf("= %v, cidr %q", err, fake.cidr)
	}
	fake.err = fmt.Errorf("%w: bad", sandbox.ErrInvalid)
	if _, err := s.UpdateRuntimeConfig(context.Background(), req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad CIDR: %v", err)
	}
	// Without sandboxes, or without a CIDR, it is a no-op.
	s2, _ := newTestServer(t, nil)
	if _, err := s2.UpdateRuntimeConfig(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}
