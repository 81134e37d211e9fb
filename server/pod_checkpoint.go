package server

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container"
)

// CheckpointPod checkpoints the running containers the request names, a
// consistent cut of the pod (container.Service.CheckpointPod), into the
// empty directory the caller made.
func (s *Server) CheckpointPod(ctx context.Context, req *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	if err := noOptions(req.GetOptions()); err != nil {
		return nil, err
	}
	if err := s.containers.CheckpointPod(ctx, req.GetPodSandboxId(), req.GetOutputPath(), req.GetContainerIds()); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.CheckpointPodResponse{}, nil
}

// RestorePod makes a pod sandbox of the request's config and, in it, one
// container per config from the checkpoint's archive of the container of
// that name, each CREATED: StartContainer restores its processes. On
// error nothing of it is left.
func (s *Server) RestorePod(ctx context.Context, req *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	if s.sandboxes == nil {
		return nil, errNoSandboxes
	}
	if s.containers == nil {
		return nil, errNoContainers
	}
	ckpt, err := s.checkRestorePod(req)
	if err != nil {
		return nil, err
	}
	podID, err := s.sandboxes.Run(ctx, req.GetConfig(), req.GetRuntimeHandler())
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &runtimeapi.RestorePodResponse{PodSandboxId: podID}
	for _, cfg := range req.GetContainerConfigs() {
		entry, _ := ckpt.Container(cfg.GetMetadata().GetName())
		cfg = proto.Clone(cfg).(*runtimeapi.ContainerConfig)
		cfg.Image = &runtimeapi.ImageSpec{Image: filepath.Join(req.GetCheckpointPath(), entry.Archive)}
		id, err := s.containers.Create(ctx, podID, cfg, req.GetConfig())
		if err != nil {
			s.undoRestorePod(ctx, resp)
			return nil, rpcError(fmt.Errorf("container %q: %w", entry.Name, err))
		}
		resp.RestoredContainers = append(resp.RestoredContainers, &runtimeapi.RestoredContainer{Name: entry.Name, ContainerId: id})
	}
	return resp, nil
}

// checkRestorePod checks a RestorePod request against its checkpoint
// before anything is made: the configs are the checkpoint's containers,
// by name, each on the image it was checkpointed on; then that this host
// can restore it at all, so that a host without CRIU runs no pod (no CNI
// ADD) only to remove it.
func (s *Server) checkRestorePod(req *runtimeapi.RestorePodRequest) (*container.PodCheckpoint, error) {
	if err := noOptions(req.GetOptions()); err != nil {
		return nil, err
	}
	if err := s.checkPodSandbox(req.GetConfig(), req.GetRuntimeHandler()); err != nil {
		return nil, err
	}
	cfgs := req.GetContainerConfigs()
	if len(cfgs) == 0 {
		return nil, invalidf("container_configs: empty: give the config of every container of the checkpoint")
	}
	ckpt, err := container.OpenPodCheckpoint(req.GetCheckpointPath())
	if err != nil {
		return nil, rpcError(err)
	}
	var names []string
	for i, cfg := range cfgs {
		if err := checkContainerConfig(cfg); err != nil {
			return nil, rpcError(fmt.Errorf("container_configs[%d]: %w", i, err))
		}
		name := cfg.GetMetadata().GetName()
		if slices.Contains(names, name) {
			return nil, invalidf("container_configs[%d]: name %q is given twice", i, name)
		}
		names = append(names, name)
		entry, ok := ckpt.Container(name)
		if !ok {
			return nil, invalidf("container_configs[%d]: the checkpoint has no container named %q (it has %s)", i, name, checkpointNames(ckpt))
		}
		if err := s.sameImage(cfg.GetImage().GetImage(), entry); err != nil {
			return nil, fmt.Errorf("container_configs[%d]: %w", i, err)
		}
	}
	if len(names) != len(ckpt.Containers) {
		return nil, invalidf("container_configs: %d configs for the checkpoint's %d containers (%s)", len(names), len(ckpt.Containers), checkpointNames(ckpt))
	}
	if err := s.containers.CheckRestore(req.GetCheckpointPath()); err != nil {
		return nil, rpcError(err)
	}
	return ckpt, nil
}

// sameImage refuses a config whose image is not the one the container
// was checkpointed on.
func (s *Server) sameImage(ref string, entry container.PodCheckpointContainer) error {
	if s.images == nil {
		return nil
	}
	img, err := s.images.Status(ref)
	if err != nil {
		return rpcError(fmt.Errorf("image %s: %w", ref, err))
	}
	if img.ID != entry.Image && !slices.Contains(img.RepoTags, entry.Image) && !slices.Contains(img.RepoDigests, entry.Image) {
		return status.Errorf(codes.InvalidArgument, "image %s (%s) is not container %q's image in the checkpoint, %s", ref, img.ID, entry.Name, entry.Image)
	}
	return nil
}

// undoRestorePod removes what a failed RestorePod made, past the
// request's end: the CRI wants nothing of it left.
func (s *Server) undoRestorePod(ctx context.Context, made *runtimeapi.RestorePodResponse) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	for _, c := range made.RestoredContainers {
		if err := s.containers.Remove(ctx, c.ContainerId); err != nil {
			s.log.Error("failed RestorePod: cannot remove its container", "container", c.ContainerId, "error", err)
		}
	}
	if err := s.sandboxes.Stop(ctx, made.PodSandboxId); err != nil {
		s.log.Error("failed RestorePod: cannot stop its pod sandbox", "pod", made.PodSandboxId, "error", err)
	}
	if err := s.sandboxes.Remove(ctx, made.PodSandboxId); err != nil {
		s.log.Error("failed RestorePod: cannot remove its pod sandbox", "pod", made.PodSandboxId, "error", err)
	}
}

// noOptions refuses the runtime-specific options of a pod checkpoint or
// restore: berth has none, and the CRI wants unknown keys refused.
func noOptions(opts map[string]string) error {
	if len(opts) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(opts))
	return invalidf("options: berth takes none; got %s", strings.Join(keys, ", "))
}

// checkpointNames lists a checkpoint's container names, for errors.
func checkpointNames(ckpt *container.PodCheckpoint) string {
	var names []string
	for _, c := range ckpt.Containers {
		names = append(names, fmt.Sprintf("%q", c.Name))
	}
	return strings.Join(names, ", ")
}
