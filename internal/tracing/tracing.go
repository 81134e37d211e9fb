// Package tracing exports OpenTelemetry spans of berth's CRI calls and of
// the steps inside them over OTLP (gRPC), continuing the trace context the
// caller sends (the kubelet does, KEP-2831). Off, every tracer is a no-op
// and the gRPC server gets no instrumentation at all.
//
// The tracer is handed to the packages that make spans: nothing here is
// global, so that tests run daemons, and tracers, side by side.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ScopeName is the instrumentation scope of berth's own spans.
const ScopeName = "github.com/berth-runtime/berth"

// MaxSamplingRatePerMillion samples every trace.
const MaxSamplingRatePerMillion = 1_000_000

// Options configure the exporter.
type Options struct {
	// Enable turns tracing on; off, the rest is ignored.
	Enable bool
	// Endpoint is the OTLP gRPC collector's host:port: plain text on a
	// loopback address, TLS (the system's roots) elsewhere unless
	// Insecure.
	Endpoint string
	Insecure bool
	// SamplingRatePerMillion is how many of a million traces that berth
	// starts itself (a call without a sampled parent) are recorded. A
	// call whose caller sampled its trace is always recorded, one whose
	// caller did not never is: the trace is the caller's decision, as
	// the kubelet's samplingRatePerMillion is for its own.
	SamplingRatePerMillion int
	// ServiceName names the exporting process (service.name), default
	// "berth".
	ServiceName    string
	ServiceVersion string
	Logger         *slog.Logger
}

// Provider is a daemon's tracing: a tracer for its packages and the gRPC
// instrumentation for its server.
type Provider struct {
	tracer trace.Tracer
	sdk    *sdktrace.TracerProvider // nil when off
}

// Off is tracing turned off: a no-op tracer and no gRPC instrumentation.
func Off() *Provider { return &Provider{tracer: noop.NewTracerProvider().Tracer(ScopeName)} }

// New starts the exporter; the connection to the collector is made in the
// background, so a collector that is down costs spans, not the start.
func New(ctx context.Context, opts Options) (*Provider, error) {
	if !opts.Enable {
		return Off(), nil
	}
	if opts.SamplingRatePerMillion < 0 || opts.SamplingRatePerMillion > MaxSamplingRatePerMillion {
		return nil, fmt.Errorf("tracing: sampling rate %d per million: want 0 to %d", opts.SamplingRatePerMillion, MaxSamplingRatePerMillion)
	}
	host, _, err := net.SplitHostPort(opts.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing: endpoint %q: want host:port: %w", opts.Endpoint, err)
	}
	eopts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(opts.Endpoint)}
	if opts.Insecure || isLoopback(host) {
		eopts = append(eopts, otlptracegrpc.WithInsecure())
	} else {
		eopts = append(eopts, otlptracegrpc.WithTLSCredentials(credentials.NewClientTLSFromCert(nil, "")))
	}
	exp, err := otlptracegrpc.New(ctx, eopts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter to %s: %w", opts.Endpoint, err)
	}
	name := opts.ServiceName
	if name == "" {
		name = "berth"
	}
	res := resource.NewWithAttributes("",
		attribute.String("service.name", name),
		attribute.String("service.version", opts.ServiceVersion))
	sampler := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(float64(opts.SamplingRatePerMillion) / MaxSamplingRatePerMillion))
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(res),
	)
	if opts.Logger != nil {
		opts.Logger.Info("tracing CRI calls", "endpoint", opts.Endpoint, "sampling_rate_per_million", opts.SamplingRatePerMillion)
	}
	return &Provider{tracer: sdk.Tracer(ScopeName), sdk: sdk}, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Tracer makes berth's spans.
func (p *Provider) Tracer() trace.Tracer { return p.tracer }

// Enabled says whether spans are exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// ServerOptions instrument a gRPC server: a span per call, the child of
// the W3C trace context in the call's metadata. None when off.
func (p *Provider) ServerOptions() []grpc.ServerOption {
	if p.sdk == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(p.sdk),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()),
	))}
}

// Shutdown exports the spans still buffered; ctx bounds it.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// OrOff is t, or a no-op tracer if t is nil: packages take an optional
// tracer in their options.
func OrOff(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer(ScopeName)
	}
	return t
}

// End ends span, marked failed with err if err is not nil.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Step runs one step of a call as a child span named name.
func Step(ctx context.Context, t trace.Tracer, name string, f func(ctx context.Context) error, attrs ...attribute.KeyValue) error {
	ctx, span := t.Start(ctx, name, trace.WithAttributes(attrs...))
	err := f(ctx)
	End(span, err)
	return err
}

// The attributes of berth's spans: OpenTelemetry's Kubernetes names
// where the CRI gives them, berth's ids otherwise.
const (
	PodID         = attribute.Key("cri.pod_sandbox.id")
	ContainerID   = attribute.Key("cri.container.id")
	Image         = attribute.Key("cri.image")
	PodName       = attribute.Key("k8s.pod.name")
	PodNamespace  = attribute.Key("k8s.namespace.name")
	PodUID        = attribute.Key("k8s.pod.uid")
	ContainerName = attribute.Key("k8s.container.name")
)

// FromContext is the tracer of the span ctx carries (a no-op one if none
// or if tracing is off): for work that a call hands on with its context,
// as a pull shared by several callers, whose package has no tracer of
// its own.
func FromContext(ctx context.Context) trace.Tracer {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(ScopeName)
}
