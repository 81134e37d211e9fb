package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListMetricDescriptors describes the metrics ListPodSandboxMetrics
// returns (cAdvisor's names, for the kubelet's /metrics/cadvisor).
func (s *Server) ListMetricDescriptors(ctx context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	if s.stats == nil {
		return nil, errNoStats
	}
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: s.stats.MetricDescriptors()}, nil
}

// ListPodSandboxMetrics returns the metrics of every ready pod.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	if s.stats == nil {
		return nil, errNoStats
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: s.stats.PodSandboxMetrics(ctx)}, nil
}
