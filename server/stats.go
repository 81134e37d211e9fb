package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stats is the stats collector, as *stats.Collector implements it.
type Stats interface {
	ContainerStats(ctx context.Context, id string) (*runtimeapi.ContainerStats, error)
	ListContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter) []*runtimeapi.ContainerStats
	PodSandboxStats(ctx context.Context, id string) (*runtimeapi.PodSandboxStats, error)
	ListPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter) []*runtimeapi.PodSandboxStats
	MetricDescriptors() []*runtimeapi.MetricDescriptor
	PodSandboxMetrics(ctx context.Context) []*runtimeapi.PodSandboxMetrics
	WritableLayers(ctx context.Context, imageFS string) (*runtimeapi.FilesystemUsage, error)
}

var errNoStats = status.Error(codes.Unimplemented, "stats are not enabled in this server")
