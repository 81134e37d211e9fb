package stats_test

import (
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// collect reads a server stream to its end and returns every item.
func collect[R any, T any](t *testing.T, stream grpc.ServerStreamingClient[R], err error, items func(*R) []T) []T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		got := items(r)
		if len(got) == 0 {
			t.Fatal("a stream message without items")
		}
		out = append(out, got...)
	}
}

func sameMessages[T proto.Message](t *testing.T, what string, list, stream []T, key func(T) string) {
	t.Helper()
	sort.Slice(list, func(i, j int) bool { return key(list[i]) < key(list[j]) })
	sort.Slice(stream, func(i, j int) bool { return key(stream[i]) < key(stream[j]) })
	if len(list) != len(stream) {
		t.Fatalf("%s: List has %d items, Stream %d", what, len(list), len(stream))
	}
	for i := range list {
		if !proto.Equal(list[i], stream[i]) {
			t.Fatalf("%s: item %d differs:\nlist   %v\nstream %v", what, i, list[i], stream[i])
		}
	}
}

func sameKeys[T any](t *testing.T, what string, list, stream []T, key func(T) string) {
	t.Helper()
	keys := func(x []T) string {
		var k []string
		for _, v := range x {
			k = append(k, key(v))
		}
		sort.Strings(k)
		return strings.Join(k, ",")
	}
	if a, b := keys(list), keys(stream); a != b || a == "" {
		t.Fatalf("%s: List %s, Stream %s", what, a, b)
	}
}

// TestStreamRPCsMatchList: each Stream* RPC returns what its List returns,
// with and without a filter. Stats change between two calls: for them the
// same objects must come back.
func TestStreamRPCsMatchList(t *testing.T) {
	e := newEnv(t)
	podA, cfgA := e.RunPod("a")
	podB, cfgB := e.RunPod("b")
	e.Run(podA, cfgA, "one", "sleep 100000", labelled("one"))
	e.Run(podA, cfgA, "two", "sleep 100000", labelled("two"))
	e.Run(podB, cfgB, "three", "sleep 100000", labelled("three"))
	ctx := framework.Ctx(t)
	rt, img := e.D.Runtime, e.D.Image

	for _, f := range []*runtimeapi.PodSandboxFilter{nil, {Id: podB}} {
		list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		s, err := rt.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: f})
		got := collect(t, s, err, func(r *runtimeapi.StreamPodSandboxesResponse) []*runtimeapi.PodSandbox { return r.PodSandboxes })
		sameMessages(t, "pod sandboxes", list.Items, got, func(p *runtimeapi.PodSandbox) string { return p.Id })
	}
	for _, f := range []*runtimeapi.ContainerFilter{nil, {PodSandboxId: podA}, {LabelSelector: map[string]string{"name": "three"}}} {
		list, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		s, err := rt.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: f})
		got := collect(t, s, err, func(r *runtimeapi.StreamContainersResponse) []*runtimeapi.Container { return r.Containers })
		sameMessages(t, "containers", list.Containers, got, func(c *runtimeapi.Container) string { return c.Id })
	}
	{
		list, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := img.StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
		got := collect(t, s, err, func(r *runtimeapi.StreamImagesResponse) []*runtimeapi.Image { return r.Images })
		sameMessages(t, "images", list.Images, got, func(i *runtimeapi.Image) string { return i.Id })
	}
	for _, f := range []*runtimeapi.ContainerStatsFilter{nil, {PodSandboxId: podA}} {
		list, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		s, err := rt.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{Filter: f})
		got := collect(t, s, err, func(r *runtimeapi.StreamContainerStatsResponse) []*runtimeapi.ContainerStats { return r.ContainerStats })
		sameKeys(t, "container stats", list.Stats, got, func(s *runtimeapi.ContainerStats) string { return s.Attributes.Id })
	}
	for _, f := range []*runtimeapi.PodSandboxStatsFilter{nil, {Id: podA}} {
		list, err := rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		s, err := rt.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{Filter: f})
		got := collect(t, s, err, func(r *runtimeapi.StreamPodSandboxStatsResponse) []*runtimeapi.PodSandboxStats {
			return r.PodSandboxStats
		})
		sameKeys(t, "pod stats", list.Stats, got, func(s *runtimeapi.PodSandboxStats) string {
			var c []string
			for _, x := range s.Linux.Containers {
				c = append(c, x.Attributes.Id)
			}
			return s.Attributes.Id + "/" + strings.Join(c, "+")
		})
	}
	{
		list, err := rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := rt.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})
		got := collect(t, s, err, func(r *runtimeapi.StreamPodSandboxMetricsResponse) []*runtimeapi.PodSandboxMetrics {
			return r.PodSandboxMetrics
		})
		sameKeys(t, "pod metrics", list.PodMetrics, got, func(m *runtimeapi.PodSandboxMetrics) string {
			var c []string
			for _, x := range m.ContainerMetrics {
				c = append(c, x.ContainerId)
			}
			return m.PodSandboxId + "/" + strings.Join(c, "+")
		})
	}
	// Nothing to list: the stream ends at once, with no message.
	s, err := rt.StreamContainers(context.Background(), &runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "nonexistent"}})
	if got := collect(t, s, err, func(r *runtimeapi.StreamContainersResponse) []*runtimeapi.Container { return r.Containers }); len(got) != 0 {
		t.Fatalf("got %v", got)
	}
}
