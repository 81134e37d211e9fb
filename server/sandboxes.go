package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/sandbox"
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

// sandboxError maps the sandbox service's errors to gRPC codes. Failures
// of the runtime itself (a CNI plugin, the kernel) are Unknown, as other
// CRI runtimes report them.
func sandboxError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandbox.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, idindex.ErrAmbiguous):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, reserve.ErrTaken):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, monitor.ErrVersion):
		// The pod's monitor runs, in a protocol this berth does not speak.
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, sandbox.ErrStuck):
		// A pod whose processes outlive SIGKILL (one in D on a filesystem
		// that does not answer) is a stop that timed out, as a
		// container's is: the kubelet retries it.
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case diskFull(err):
		return status.Error(codes.ResourceExhausted, err.Error())
	default:
		return status.Error(codes.Unknown, err.Error())
	}
}

func invalidf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
