package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/stats"
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

func statsError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idindex.ErrAmbiguous):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, stats.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	default:
		return status.Error(codes.Unknown, err.Error())
	}
}
