package kubelet_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/otlp"
)

const tracedPod = `apiVersion: v1
kind: Pod
metadata:
  name: traced
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleeper
    image: registry.k8s.io/e2e-test-images/busybox:1.29-2
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
`

// TestTracing: the stock kubelet and berth export to one OTLP receiver,
// the kubelet sampling everything and berth nothing of its own; a pod's
// start is one trace: the kubelet's CRI client spans, and under each the
// span of berth's side of the call with its steps.
func TestTracing(t *testing.T) {
	r := otlp.Start(t)
	e := newEnv(t, fmt.Sprintf("[tracing]\nenable = true\nendpoint = %q\nsampling_rate_per_million = 0\n", r.Addr))
	k := e.startKubelet(kubeletOptions{tracing: r.Addr})
	manifest := k.writeManifest("traced", tracedPod)
	t.Cleanup(func() { os.Remove(manifest) })
	name := "traced-" + e.nodeName
	pod := k.waitPod(t, name, 3*time.Minute, "Running", func(p *pod) bool {
		c := p.container("sleeper")
		return p.Status.Phase == "Running" && c != nil && c.State.Running != nil
	})
	sandboxes := e.podSandboxes(t, pod.Metadata.UID)
	if len(sandboxes) != 1 {
		t.Fatalf("berth has %d sandboxes of pod %s, want 1", len(sandboxes), name)
	}
	id := sandboxes[0].Id
	const berthRun = "runtime.v1.RuntimeService/RunPodSandbox"
	var run, client otlp.Span
	r.Wait(t, time.Minute, "berth's RunPodSandbox span of pod "+id+" under a kubelet span", func(spans []otlp.Span) bool {
		byID := map[string]otlp.Span{}
		for _, s := range spans {
			byID[s.ID] = s
		}
		for _, s := range spans {
			if s.Service == "berth" && s.Name == berthRun && s.Attrs["cri.pod_sandbox.id"] == id {
				p, ok := byID[s.ParentID]
				if ok && p.Service == "kubelet" {
					run, client = s, p
					return true
				}
			}
		}
		return false
	})
	spans := r.Trace(run.TraceID)
	var kubeletSpans, berthSpans []string
	for _, s := range spans {
		switch s.Service {
		case "kubelet":
			kubeletSpans = append(kubeletSpans, s.Name)
		case "berth":
			berthSpans = append(berthSpans, s.Name)
		}
	}
	t.Logf("trace %s: kubelet spans %v; berth spans %v", run.TraceID, kubeletSpans, berthSpans)
	if !strings.Contains(client.Name, "RunPodSandbox") {
		t.Errorf("berth's RunPodSandbox span's parent is the kubelet's %q, want its RunPodSandbox call", client.Name)
	}
	if _, ok := otlp.Find(spans, "CNI ADD", run.ID); !ok {
		t.Errorf("no CNI ADD span under berth's RunPodSandbox in the kubelet's trace")
	}
	// The same trace goes on to the pod's container: the kubelet's
	// SyncPod holds every call of the pod's start.
	var create bool
	for _, s := range spans {
		if s.Service == "berth" && s.Name == "runtime.v1.RuntimeService/CreateContainer" && s.Attrs["k8s.container.name"] == "sleeper" {
			create = true
		}
	}
	if !create {
		t.Errorf("no berth CreateContainer span of container sleeper in the pod start's trace")
	}
}
