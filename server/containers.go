package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/monitor"
)

// Containers is the container service, as *container.Service implements
// it.
type Containers interface {
	Create(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, podCfg *runtimeapi.PodSandboxConfig) (string, error)
	Start(ctx context.Context, id string) error
	Stop(ctx context.Context, id string, timeout time.Duration) error
	Remove(ctx context.Context, id string) error
	Status(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatus, map[string]string, error)
	List(ctx context.Context, filter *runtimeapi.ContainerFilter) []*runtimeapi.Container
	PodStatuses(ctx context.Context, podID string) []*runtimeapi.ContainerStatus
	ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (*container.ExecResult, error)
	ReopenLog(ctx context.Context, id string) error
	UpdateResources(ctx context.Context, id string, r *runtimeapi.LinuxContainerResources) error
}

var errNoContainers = status.Error(codes.Unimplemented, "containers are not enabled in this server")

// containerError maps the container service's errors to gRPC codes.
func containerError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, container.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, container.ErrInvalid), errors.Is(err, idindex.ErrAmbiguous):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, container.ErrNameReserved):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, container.ErrState):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, monitor.ErrVersion):
		// The pod's monitor runs, in a protocol this berth does not speak.
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, container.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case diskFull(err):
		return status.Error(codes.ResourceExhausted, err.Error())
	default:
		return status.Error(codes.Unknown, err.Error())
	}
}
