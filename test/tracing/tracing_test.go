package tracing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
	"github.com/berth-runtime/berth/test/otlp"
)

// caller is a trace context as the kubelet sends it: W3C traceparent.
type caller struct {
	traceID, spanID string
	sampled         bool
}

func newCaller(sampled bool) caller {
	return caller{traceID: framework.RandHex(16), spanID: framework.RandHex(8), sampled: sampled}
}

func (c caller) ctx(t *testing.T) context.Context {
	flags := "00"
	if c.sampled {
		flags = "01"
	}
	return metadata.AppendToOutgoingContext(framework.Ctx(t), "traceparent", fmt.Sprintf("00-%s-%s-%s", c.traceID, c.spanID, flags))
}

// child is the span named name whose parent is parent, or fails.
func child(t *testing.T, spans []otlp.Span, name string, parent otlp.Span) otlp.Span {
	t.Helper()
	s, ok := otlp.Find(spans, name, parent.ID)
	if !ok {
		t.Errorf("no span %q under %q (%s)", name, parent.Name, parent.ID)
	}
	return s
}

func TestCRICallSpans(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.TestRegistry(t)
	r := otlp.Start(t)
	n := cnitest.NewNet(t)
	parent := "/trace-" + framework.RandHex(4)
	t.Cleanup(func() { framework.RemoveCgroup(parent) })
	// sampling 0: only what a sampled caller's trace asks for is recorded.
	d := framework.StartDaemon(t,
		framework.WithConfig(fmt.Sprintf("[tracing]\nenable = true\nendpoint = %q\nsampling_rate_per_million = 0\n", r.Addr)),
		framework.WithArgs("--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.BinDir))
	image := reg + "/library/busybox:latest"

	pull := newCaller(true)
	if _, err := d.Image.PullImage(pull.ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	run := newCaller(true)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "traced", Namespace: "e2e", Uid: "uid-traced-" + framework.RandHex(3)},
		Hostname:     "traced",
		LogDirectory: t.TempDir(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
	}
	resp, err := d.Runtime.RunPodSandbox(run.ctx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	pod := resp.PodSandboxId
	create := newCaller(true)
	cresp, err := d.Runtime.CreateContainer(create.ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, SandboxConfig: cfg, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  []string{"sleep", "60"},
	}})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	start := newCaller(true)
	if _, err := d.Runtime.StartContainer(start.ctx(t), &runtimeapi.StartContainerRequest{ContainerId: cresp.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	// Neither of these may be recorded: a caller that did not sample
	// its trace, and a call with no trace context at sampling 0.
	unsampled := newCaller(false)
	if _, err := d.Runtime.PodSandboxStatus(unsampled.ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{}); err != nil {
		t.Fatal(err)
	}
	stop := newCaller(true)
	if _, err := d.Runtime.StopPodSandbox(stop.ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}

	// The exporter batches for a second.
	rpc := func(c caller, method string) func([]otlp.Span) bool {
		return func(spans []otlp.Span) bool {
			_, ok := otlp.Find(spans, "runtime.v1."+method, c.spanID)
			return ok
		}
	}
	r.Wait(t, 30*time.Second, "span of StopPodSandbox", rpc(stop, "RuntimeService/StopPodSandbox"))
	r.Wait(t, 10*time.Second, "span of the pull's layer", func(spans []otlp.Span) bool {
		_, ok := otlp.Find(spans, "layer fetch and unpack", "")
		return ok
	})

	spans := r.Trace(run.traceID)
	call, ok := otlp.Find(spans, "runtime.v1.RuntimeService/RunPodSandbox", run.spanID)
	if !ok {
		t.Fatalf("no RunPodSandbox span whose parent is the caller's span %s: %v", run.spanID, spans)
	}
	for k, want := range map[string]string{
		"cri.pod_sandbox.id": pod, "k8s.pod.name": "traced", "k8s.namespace.name": "e2e", "k8s.pod.uid": cfg.Metadata.Uid,
	} {
		if got := call.Attrs[k]; got != want {
			t.Errorf("RunPodSandbox span: %s = %q, want %q", k, got, want)
		}
	}
	if call.Service != "berth" {
		t.Errorf("RunPodSandbox span from service %q, want berth", call.Service)
	}
	for _, name := range []string{"pod files", "netns create", "CNI ADD"} {
		child(t, spans, name, call)
	}
	pause := child(t, spans, "pause start", call)
	child(t, spans, "monitor start", pause)
	child(t, spans, "pause run", pause)
	for _, s := range spans {
		if s.Start.Before(call.Start) || s.End.After(call.End) {
			t.Errorf("span %q (%s to %s) outside its call's (%s to %s)", s.Name, s.Start, s.End, call.Start, call.End)
		}
	}

	spans = r.Trace(create.traceID)
	call, ok = otlp.Find(spans, "runtime.v1.RuntimeService/CreateContainer", create.spanID)
	if !ok {
		t.Fatalf("no CreateContainer span under the caller's: %v", spans)
	}
	if call.Attrs["cri.container.id"] != cresp.ContainerId || call.Attrs["cri.pod_sandbox.id"] != pod || call.Attrs["k8s.container.name"] != "sleeper" {
		t.Errorf("CreateContainer span attributes %v, want container %s (sleeper) of pod %s", call.Attrs, cresp.ContainerId, pod)
	}
	for _, name := range []string{"rootfs mount", "OCI spec", "libcontainer create"} {
		child(t, spans, name, call)
	}
	spans = r.Trace(start.traceID)
	call, ok = otlp.Find(spans, "runtime.v1.RuntimeService/StartContainer", start.spanID)
	if !ok {
		t.Fatalf("no StartContainer span under the caller's: %v", spans)
	}
	child(t, spans, "libcontainer start", call)

	spans = r.Trace(stop.traceID)
	call, _ = otlp.Find(spans, "runtime.v1.RuntimeService/StopPodSandbox", stop.spanID)
	child(t, spans, "CNI DEL", call)

	spans = r.Trace(pull.traceID)
	call, ok = otlp.Find(spans, "runtime.v1.ImageService/PullImage", pull.spanID)
	if !ok {
		t.Fatalf("no PullImage span under the caller's: %v", spans)
	}
	p := child(t, spans, "image pull", call)
	child(t, spans, "image manifest", p)
	layer := child(t, spans, "layer fetch and unpack", p)
	if layer.Attrs["layer"] == "" {
		t.Errorf("layer span without its digest: %v", layer.Attrs)
	}

	for _, s := range r.Spans() {
		if s.TraceID == unsampled.traceID || s.Name == "runtime.v1.RuntimeService/ListContainers" {
			t.Errorf("span of a call not sampled: %s", s)
		}
	}
}

// TestSamplingRate: calls with no trace context are traces of berth's
// own, recorded at the configured rate (all of them at a million).
func TestSamplingRate(t *testing.T) {
	framework.RequireRoot(t)
	r := otlp.Start(t)
	d := framework.StartDaemon(t, framework.WithConfig(fmt.Sprintf("[tracing]\nenable = true\nendpoint = %q\nsampling_rate_per_million = 1000000\n", r.Addr)))
	if _, err := d.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	spans := r.Wait(t, 30*time.Second, "span of ListPodSandbox", func(spans []otlp.Span) bool {
		_, ok := otlp.Find(spans, "runtime.v1.RuntimeService/ListPodSandbox", "")
		return ok
	})
	s, _ := otlp.Find(spans, "runtime.v1.RuntimeService/ListPodSandbox", "")
	if s.ParentID != "" {
		t.Errorf("a call without trace context has parent %s, want a root span", s.ParentID)
	}
}
