package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container"
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
	// Checkpoint writes a checkpoint archive at location; timeout 0 is
	// the service's default.
	Checkpoint(ctx context.Context, id, location string, timeout time.Duration) error
	// CheckpointPod writes a checkpoint of the pod's containers ids into
	// the empty directory dir.
	CheckpointPod(ctx context.Context, podID, dir string, ids []string) error
	// CheckRestore tells, before a RestorePod from the pod checkpoint in
	// dir makes anything, whether this host can restore it.
	CheckRestore(dir string) error
}

var errNoContainers = status.Error(codes.Unimplemented, "containers are not enabled in this server")
