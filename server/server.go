// Package server serves the CRI gRPC services. It validates requests, maps
// errors to gRPC codes and calls into the packages below it; what the
// runtime does lives there, one file here per CRI area.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/events"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/network"
)

// maxMsgSize bounds CRI messages both ways. gRPC's 4 MiB default is too
// small for List answers on a busy node; the kubelet's own client allows 16.
const maxMsgSize = 16 << 20

// Options are what the server is built from.
type Options struct {
	Config  *config.Config // effective, already validated
	Network network.Status
	Logger  *slog.Logger
	Metrics *Metrics // nil disables metrics
	// Images serves the image RPCs; nil answers Unimplemented.
	Images Images
	// Sandboxes serves the pod sandbox RPCs; nil answers Unimplemented.
	Sandboxes Sandboxes
	// Containers serves the container RPCs; nil answers Unimplemented.
	Containers Containers
	// Streams hands out the URLs of Exec, Attach and PortForward; nil
	// answers Unimplemented.
	Streams Streams
	// Stats serves the stats and metrics RPCs; nil answers Unimplemented.
	Stats Stats
	// Events feeds GetContainerEvents; nil answers Unimplemented.
	Events *events.Bus

	// UserNamespaces: pods may have their own user namespace (mode POD),
	// as container.ProbeUserNamespaces found at start. Status reports it
	// per handler; without it RunPodSandbox refuses such a pod.
	UserNamespaces bool

	// GRPCOptions are more options of the gRPC server: the tracing's
	// instrumentation (internal/tracing), which makes each call's span.
	GRPCOptions []grpc.ServerOption

	// DebugPanicMethod, if set, makes every call of the named RPC (e.g.
	// "ListImages") panic, so that tests can check that a panicking handler
	// cannot take the daemon down.
	DebugPanicMethod string
}

// Server implements the CRI RuntimeService and ImageService. Every RPC not
// implemented yet answers codes.Unimplemented through the embedded types.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	cfg          *config.Config
	configJSON   string
	cgroupDriver runtimeapi.CgroupDriver
	network      network.Status
	images       Images
	sandboxes    Sandboxes
	containers   Containers
	streams      Streams
	stats        Stats
	events       *events.Bus
	log          *slog.Logger
	metrics      *Metrics
	panicMethod  string
	grpcOpts     []grpc.ServerOption
	// rro: recursive read-only mounts work on this kernel (Status reports it).
	rro bool
	// userns: pods may have their own user namespace (Options).
	userns bool
}

// New checks the options and builds a Server.
func New(opts Options) (*Server, error) {
	if opts.Config == nil || opts.Network == nil || opts.Logger == nil {
		return nil, errors.New("server: Config, Network and Logger are required")
	}
	driver, err := cgroupDriver(opts.Config.CgroupDriver)
	if err != nil {
		return nil, err
	}
	// The config never changes while serving, so Status(verbose) can answer
	// from this copy.
	cfgJSON, err := opts.Config.JSON()
	if err != nil {
		return nil, fmt.Errorf("render config: %w", err)
	}
	return &Server{
		cfg:          opts.Config,
		configJSON:   string(cfgJSON),
		cgroupDriver: driver,
		network:      opts.Network,
		images:       opts.Images,
		sandboxes:    opts.Sandboxes,
		containers:   opts.Containers,
		streams:      opts.Streams,
		stats:        opts.Stats,
		events:       opts.Events,
		log:          opts.Logger,
		metrics:      opts.Metrics,
		panicMethod:  opts.DebugPanicMethod,
		grpcOpts:     opts.GRPCOptions,
		rro:          kernelHasMountSetattr(),
		userns:       opts.UserNamespaces,
	}, nil
}

// GRPCServer returns a gRPC server with both CRI services registered,
// behind the recovery, logging and metrics interceptors.
func (s *Server) GRPCServer() *grpc.Server {
	unary := []grpc.UnaryServerInterceptor{s.observeUnary, recoverUnary(s.log)}
	stream := []grpc.StreamServerInterceptor{s.observeStream, recoverStream(s.log)}
	if s.panicMethod != "" {
		unary = append(unary, panicUnary(s.panicMethod))
	}
	g := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.MaxSendMsgSize(maxMsgSize),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}, s.grpcOpts...)...)
	runtimeapi.RegisterRuntimeServiceServer(g, s)
	runtimeapi.RegisterImageServiceServer(g, s)
	return g
}

// The interceptors run in the order given to GRPCServer: observe is
// outermost so that it records the code a recovered panic turns into.

func (s *Server) observeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	s.observe(ctx, info.FullMethod, req, start, err)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(spanAttrs(req, resp)...)
	}
	return resp, err
}

// spanAttrs are what a call was about, for its span: the ids it names or
// made, and the Kubernetes names where the request has them.
func spanAttrs(req, resp any) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if r, ok := req.(interface{ GetPodSandboxId() string }); ok && r.GetPodSandboxId() != "" {
		attrs = append(attrs, tracing.PodID.String(r.GetPodSandboxId()))
	}
	if r, ok := req.(interface{ GetContainerId() string }); ok && r.GetContainerId() != "" {
		attrs = append(attrs, tracing.ContainerID.String(r.GetContainerId()))
	}
	var pod *runtimeapi.PodSandboxMetadata
	switch r := req.(type) {
	case *runtimeapi.RunPodSandboxRequest:
		pod = r.GetConfig().GetMetadata()
	case *runtimeapi.CreateContainerRequest:
		pod = r.GetSandboxConfig().GetMetadata()
		attrs = append(attrs, tracing.ContainerName.String(r.GetConfig().GetMetadata().GetName()),
			tracing.Image.String(r.GetConfig().GetImage().GetImage()))
	case *runtimeapi.PullImageRequest:
		pod = r.GetSandboxConfig().GetMetadata()
		attrs = append(attrs, tracing.Image.String(r.GetImage().GetImage()))
	}
	if pod != nil {
		attrs = append(attrs, tracing.PodName.String(pod.GetName()), tracing.PodNamespace.String(pod.GetNamespace()),
			tracing.PodUID.String(pod.GetUid()))
	}
	switch r := resp.(type) {
	case *runtimeapi.RunPodSandboxResponse:
		attrs = append(attrs, tracing.PodID.String(r.GetPodSandboxId()))
	case *runtimeapi.CreateContainerResponse:
		attrs = append(attrs, tracing.ContainerID.String(r.GetContainerId()))
	}
	return attrs
}

func (s *Server) observeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	s.observe(ss.Context(), info.FullMethod, nil, start, err)
	return err
}

// mutating are the RPCs that change the node: a failure of one is worth a
// warning naming what it was about (a full disk, a plugin that fails, a
// pod left half-made), where a failed query is the caller's business.
var mutating = map[string]bool{
	"RunPodSandbox": true, "StopPodSandbox": true, "RemovePodSandbox": true, "UpdatePodSandboxResources": true,
	"CreateContainer": true, "StartContainer": true, "StopContainer": true, "RemoveContainer": true,
	"UpdateContainerResources": true, "ReopenContainerLog": true, "CheckpointContainer": true,
	"UpdateRuntimeConfig": true, "PullImage": true, "RemoveImage": true,
}

func (s *Server) observe(ctx context.Context, fullMethod string, req any, start time.Time, err error) {
	elapsed := time.Since(start)
	code := status.Code(err)
	service, method := splitMethod(fullMethod)
	s.metrics.observe(service, method, code, elapsed)

	// Internal and Unknown mean a bug or an unmapped error: worth more than
	// a debug line. Other failures of calls that change the node are
	// warnings; expected failures of queries (NotFound, ...) stay at debug.
	level := slog.LevelDebug
	switch {
	case code == codes.Internal || code == codes.Unknown:
		level = slog.LevelError
	case err != nil && mutating[method]:
		level = slog.LevelWarn
	}
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.Duration("duration", elapsed),
		slog.String("code", code.String()),
	}
	if err != nil {
		attrs = append(attrs, requestAttrs(req)...)
		attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
	}
	s.log.LogAttrs(ctx, level, "CRI call", attrs...)
}

// requestAttrs are what a failed request was about, for its log line: the
// pod, container or image it names.
func requestAttrs(req any) []slog.Attr {
	var attrs []slog.Attr
	if r, ok := req.(interface{ GetPodSandboxId() string }); ok && r.GetPodSandboxId() != "" {
		attrs = append(attrs, slog.String("pod", r.GetPodSandboxId()))
	}
	if r, ok := req.(interface{ GetContainerId() string }); ok && r.GetContainerId() != "" {
		attrs = append(attrs, slog.String("container", r.GetContainerId()))
	}
	switch r := req.(type) {
	case *runtimeapi.RunPodSandboxRequest:
		md := r.GetConfig().GetMetadata()
		attrs = append(attrs, slog.String("pod_name", fmt.Sprintf("%s/%s (uid %s, attempt %d)", md.GetNamespace(), md.GetName(), md.GetUid(), md.GetAttempt())))
	case *runtimeapi.CreateContainerRequest:
		md := r.GetConfig().GetMetadata()
		attrs = append(attrs, slog.String("container_name", fmt.Sprintf("%s (attempt %d)", md.GetName(), md.GetAttempt())))
	case *runtimeapi.PullImageRequest:
		attrs = append(attrs, slog.String("image", r.GetImage().GetImage()))
	case *runtimeapi.RemoveImageRequest:
		attrs = append(attrs, slog.String("image", r.GetImage().GetImage()))
	}
	return attrs
}

// splitMethod turns "/runtime.v1.RuntimeService/Version" into
// ("RuntimeService", "Version").
func splitMethod(fullMethod string) (service, method string) {
	service, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return "unknown", fullMethod
	}
	if i := strings.LastIndex(service, "."); i >= 0 {
		service = service[i+1:]
	}
	return service, method
}

func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				resp, err = nil, panicError(ctx, log, info.FullMethod, r)
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicError(ss.Context(), log, info.FullMethod, r)
			}
		}()
		return handler(srv, ss)
	}
}

// panicError logs a recovered panic with its stack and turns it into the
// error the client gets: one bad request must not end every pod's runtime.
func panicError(ctx context.Context, log *slog.Logger, fullMethod string, r any) error {
	log.ErrorContext(ctx, "panic in CRI handler",
		"method", fullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	return status.Errorf(codes.Internal, "internal error: panic in %s: %v", fullMethod, r)
}

func panicUnary(method string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if _, m := splitMethod(info.FullMethod); m == method {
			panic("debug panic requested for " + method)
		}
		return handler(ctx, req)
	}
}
