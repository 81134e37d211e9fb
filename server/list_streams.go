package server

import (
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The Stream* RPCs return what the matching List returns, split into
// messages small enough for any client's default receive limit (4 MiB),
// each item once, at least one item per message; no items, no message.
const (
	chunkBytes = 2 << 20
	chunkItems = 1000
)

// sendChunks sends items in consecutive chunks.
func sendChunks[T proto.Message](items []T, send func([]T) error) error {
	start, size := 0, 0
	for i, it := range items {
		n := proto.Size(it)
		if i > start && (size+n > chunkBytes || i-start >= chunkItems) {
			if err := send(items[start:i]); err != nil {
				return err
			}
			start, size = i, 0
		}
		size += n
	}
	if start < len(items) {
		return send(items[start:])
	}
	return nil
}

// StreamPodSandboxes streams ListPodSandbox's answer.
func (s *Server) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	if s.sandboxes == nil {
		return errNoSandboxes
	}
	return sendChunks(s.sandboxes.List(stream.Context(), req.GetFilter()), func(c []*runtimeapi.PodSandbox) error {
		return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: c})
	})
}

// StreamContainers streams ListContainers' answer.
func (s *Server) StreamContainers(req *runtimeapi.StreamContainersRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	if s.containers == nil {
		return errNoContainers
	}
	return sendChunks(s.containers.List(stream.Context(), req.GetFilter()), func(c []*runtimeapi.Container) error {
		return stream.Send(&runtimeapi.StreamContainersResponse{Containers: c})
	})
}

// StreamContainerStats streams ListContainerStats' answer.
func (s *Server) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	if s.stats == nil {
		return errNoStats
	}
	return sendChunks(s.stats.ListContainerStats(stream.Context(), req.GetFilter()), func(c []*runtimeapi.ContainerStats) error {
		return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: c})
	})
}

// StreamPodSandboxStats streams ListPodSandboxStats' answer.
func (s *Server) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	if s.stats == nil {
		return errNoStats
	}
	return sendChunks(s.stats.ListPodSandboxStats(stream.Context(), req.GetFilter()), func(c []*runtimeapi.PodSandboxStats) error {
		return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: c})
	})
}

// StreamPodSandboxMetrics streams ListPodSandboxMetrics' answer.
func (s *Server) StreamPodSandboxMetrics(req *runtimeapi.StreamPodSandboxMetricsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	if s.stats == nil {
		return errNoStats
	}
	return sendChunks(s.stats.PodSandboxMetrics(stream.Context()), func(c []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: c})
	})
}

// StreamImages streams ListImages' answer.
func (s *Server) StreamImages(req *runtimeapi.StreamImagesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	resp, err := s.ListImages(stream.Context(), &runtimeapi.ListImagesRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunks(resp.GetImages(), func(c []*runtimeapi.Image) error {
		return stream.Send(&runtimeapi.StreamImagesResponse{Images: c})
	})
}
