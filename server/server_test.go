package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/network"
)

type fakeNetwork network.Condition

func (f fakeNetwork) Status(context.Context) network.Condition { return network.Condition(f) }

func newTestServer(t *testing.T, mutate func(*Options)) (*Server, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	opts := Options{
		Config:  config.Default(),
		Network: fakeNetwork{Ready: true},
		Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, &logs
}

func TestRecoverUnary(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/RunPodSandbox"}
	tests := []struct {
		name     string
		handler  grpc.UnaryHandler
		wantResp any
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "no panic", handler: func(context.Context, any) (any, error) { return "ok", nil }, wantResp: "ok", wantCode: codes.OK},
		{name: "error passes through", handler: func(context.Context, any) (any, error) {
			return nil, status.Error(codes.NotFound, "gone")
		}, wantCode: codes.NotFound, wantMsg: "gone"},
		{name: "panic string", handler: func(context.Context, any) (any, error) { panic("boom") }, wantCode: codes.Internal, wantMsg: "boom"},
		{name: "panic error", handler: func(context.Context, any) (any, error) { panic(errors.New("bad thing")) }, wantCode: codes.Internal, wantMsg: "bad thing"},
		{name: "nil dereference", handler: func(context.Context, any) (any, error) {
			var p *runtimeapi.PodSandboxConfig
			return p.Metadata.Name, nil
		}, wantCode: codes.Internal, wantMsg: "nil pointer dereference"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			resp, err := recoverUnary(log)(context.Background(), nil, info, tt.handler)
			if status.Code(err) != tt.wantCode || !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Fatalf("err = %v, want code %s with %q", err, tt.wantCode, tt.wantMsg)
			}
			if resp != tt.wantResp {
				t.Errorf("resp = %v, want %v", resp, tt.wantResp)
			}
			panicked := tt.wantCode == codes.Internal
			if logged := strings.Contains(logs.String(), "panic in CRI handler"); logged != panicked {
				t.Errorf("panic logged = %v, want %v: %s", logged, panicked, logs.String())
			}
			if panicked && (!strings.Contains(logs.String(), "stack=") || !strings.Contains(logs.String(), "RunPodSandbox")) {
				t.Errorf("panic log lacks the stack or method: %s", logs.String())
			}
		})
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

func TestRecoverStream(t *testing.T) {
	info := &grpc.StreamServerInfo{FullMethod: "/runtime.v1.RuntimeService/GetContainerEvents", IsServerStream: true}
	tests := []struct {
		name     string
		handler  grpc.StreamHandler
		wantCode codes.Code
	}{
		{name: "no panic", handler: func(any, grpc.ServerStream) error { return nil }, wantCode: codes.OK},
		{name: "error", handler: func(any, grpc.ServerStream) error { return status.Error(codes.Canceled, "bye") }, wantCode: codes.Canceled},
		{name: "panic", handler: func(any, grpc.ServerStream) error { panic("stream boom") }, wantCode: codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			err := recoverStream(log)(nil, fakeStream{ctx: context.Background()}, info, tt.handler)
			if status.Code(err) != tt.wantCode {
				t.Fatalf("err = %v, want code %s", err, tt.wantCode)
			}
			if tt.wantCode == codes.Internal && !strings.Contains(logs.String(), "GetContainerEvents") {
				t.Errorf("panic not logged with its method: %s", logs.String())
			}
		})
	}
}

func TestSplitMethod(t *testing.T) {
	tests := []struct{ in, service, method string }{
		{"/runtime.v1.RuntimeService/Version", "RuntimeService", "Version"},
		{"/runtime.v1.ImageService/PullImage", "ImageService", "PullImage"},
		{"/Plain/Call", "Plain", "Call"},
		{"garbage", "unknown", "garbage"},
	}
	for _, tt := range tests {
		if s, m := splitMethod(tt.in); s != tt.service || m != tt.method {
			t.Errorf("splitMethod(%q) = %q, %q; want %q, %q", tt.in, s, m, tt.service, tt.method)
		}
	}
}

func TestNewRejectsMissingOptions(t *testing.T) {
	if _, err := New(Options{Config: config.Default()}); err == nil {
		t.Error("New without Network and Logger succeeded")
	}
	cfg := config.Default()
	cfg.CgroupDriver = "nonsense"
	if _, err := New(Options{Config: cfg, Network: fakeNetwork{}, Logger: slog.Default()}); err == nil {
		t.Error("New with an unknown cgroup driver succeeded")
	}
}

// TestGRPCServer checks the wiring through a real gRPC server: both
// services registered, the interceptor chain in place, metrics counted.
func TestGRPCServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s, logs := newTestServer(t, func(o *Options) {
		o.Metrics = metrics
		o.DebugPanicMethod = "ImageFsInfo"
	})
	lis := bufconn.Listen(1 << 20)
	g := s.GRPCServer()
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rt, img := runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
	ctx := context.Background()

	tests := []struct {
		name     string
		call     func() error
		service  string
		method   string
		wantCode codes.Code
	}{
		{"Version", func() error { _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); return err }, "RuntimeService", "Version", codes.OK},
		{"unimplemented runtime RPC", func() error { _, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); return err }, "RuntimeService", "ListPodSandbox", codes.Unimplemented},
		{"unimplemented image RPC", func() error { _, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{}); return err }, "ImageService", "ListImages", codes.Unimplemented},
		{"panicking RPC", func() error { _, err := img.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}); return err }, "ImageService", "ImageFsInfo", codes.Internal},
		{"alive after a panic", func() error { _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); return err }, "RuntimeService", "Version", codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(metrics.calls.WithLabelValues(tt.service, tt.method, tt.wantCode.String()))
			if err := tt.call(); status.Code(err) != tt.wantCode {
				t.Fatalf("err = %v, want %s", err, tt.wantCode)
			}
			after := testutil.ToFloat64(metrics.calls.WithLabelValues(tt.service, tt.method, tt.wantCode.String()))
			if after != before+1 {
				t.Errorf("counter went from %v to %v, want +1", before, after)
			}
		})
	}
	if n := testutil.CollectAndCount(metrics.latency); n == 0 {
		t.Error("no latency observations")
	}
	if !strings.Contains(logs.String(), "method=Version") || !strings.Contains(logs.String(), "code=OK") {
		t.Errorf("no debug log of the Version call: %s", logs.String())
	}
}

// TestFailureLogLevel: a failed call that changes the node is a warning
// naming the object and the error (under the one key, "error"); a failed
// query stays at debug; a success is not a warning.
func TestFailureLogLevel(t *testing.T) {
	full := status.Error(codes.ResourceExhausted, "container c1: write record: no space left on device")
	tests := []struct {
		name   string
		method string
		req    any
		err    error
		want   []string
	}{
		{"create fails, disk full", "/runtime.v1.RuntimeService/CreateContainer",
			&runtimeapi.CreateContainerRequest{PodSandboxId: "pod1", Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "web"}}}, full,
			[]string{"level=WARN", "method=CreateContainer", "pod=pod1", `container_name="web (attempt 0)"`, "code=ResourceExhausted", `error="container c1: write record: no space left on device"`}},
		{"stop container fails", "/runtime.v1.RuntimeService/StopContainer",
			&runtimeapi.StopContainerRequest{ContainerId: "c1"}, status.Error(codes.DeadlineExceeded, "stuck"),
			[]string{"level=WARN", "container=c1", "error=stuck"}},
		{"run pod fails", "/runtime.v1.RuntimeService/RunPodSandbox",
			&runtimeapi.RunPodSandboxRequest{Config: goodConfig()}, status.Error(codes.Unknown, "CNI ADD failed"),
			[]string{"level=ERROR", `pod_name="ns/n (uid u, attempt 0)"`, `error="CNI ADD failed"`}},
		{"pull fails", "/runtime.v1.ImageService/PullImage",
			&runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}, status.Error(codes.NotFound, "no such image"),
			[]string{"level=WARN", "image=busybox"}},
		{"query fails", "/runtime.v1.RuntimeService/ContainerStatus",
			&runtimeapi.ContainerStatusRequest{ContainerId: "c1"}, status.Error(codes.NotFound, "container c1 not found"),
			[]string{"level=DEBUG", "container=c1"}},
		{"mutation succeeds", "/runtime.v1.RuntimeService/StopPodSandbox",
			&runtimeapi.StopPodSandboxRequest{PodSandboxId: "pod1"}, nil,
			[]string{"level=DEBUG", "code=OK"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, logs := newTestServer(t, nil)
			s.observeUnary(context.Background(), tt.req, &grpc.UnaryServerInfo{FullMethod: tt.method},
				func(context.Context, any) (any, error) { return nil, tt.err })
			line := logs.String()
			for _, w := range tt.want {
				if !strings.Contains(line, w) {
					t.Errorf("log %q lacks %s", line, w)
				}
			}
			if strings.Contains(line, " err=") {
				t.Errorf("log %q uses the key err, not error", line)
			}
		})
	}
}
