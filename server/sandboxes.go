package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Sandboxes is the pod sandbox service, as *sandbox.Manager implements it.
type Sandboxes interface {
	Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error)
	Stop(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	Status(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatus, map[string]string, error)
	List(ctx context.Context, filter *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox
	UpdatePodCIDR(ctx context.Context, cidrs string) error
}

var errNoSandboxes = status.Error(codes.Unimplemented, "pod sandboxes are not enabled in this server")

func invalidf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
