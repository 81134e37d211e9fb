package container

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/monitor"
)

// Exit reasons, as the kubelet and containerd spell them.
const (
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	ReasonOOMKilled = "OOMKilled"
)

func criState(c *ctr) runtimeapi.ContainerState {
	switch c.rec.State {
	case StateCreated:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case StateRunning:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case StateExited:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}

// statusImage is the image a container reports: by the name the pod spec
// gave it. The kubelet creates containers by image id and passes that name
// as UserSpecifiedImage; it then shows ContainerStatus.image as the pod's
// status image, which users and the e2e suites compare with the spec (an
// updated image "never ran" while an id is shown). containerd reports a
// name there too.
func statusImage(spec *runtimeapi.ImageSpec) *runtimeapi.ImageSpec {
	if spec.GetUserSpecifiedImage() == "" {
		return spec
	}
	out := proto.Clone(spec).(*runtimeapi.ImageSpec)
	out.Image = spec.GetUserSpecifiedImage()
	return out
}

// Status is ContainerStatus, from memory. The verbose map holds "info": a
// JSON document with the pid, the OCI spec and where things are.
func (s *Service) Status(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatus, map[string]string, error) {
	c, err := s.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	st := c.status()
	if !verbose {
		return st, nil, nil
	}
	r := &c.rec
	info := map[string]any{
		"sandboxID":   r.PodID,
		"pid":         r.Pid,
		"rootfs":      r.Dir + "/rootfs",
		"runtimeSpec": json.RawMessage(c.spec),
	}
	if r.State == StateExited {
		info["pid"] = 0
	}
	b, err := json.Marshal(info)
	if err != nil {
		return nil, nil, fmt.Errorf("container %s: verbose info: %w", r.ID, err)
	}
	return st, map[string]string{"info": string(b)}, nil
}

// PodStatuses are the statuses of a pod's containers, as ContainerStatus
// gives them, for the responses that carry them all (PodSandboxStatus,
// container events).
func (s *Service) PodStatuses(ctx context.Context, podID string) []*runtimeapi.ContainerStatus {
	ls := s.listed(&runtimeapi.ContainerFilter{PodSandboxId: podID})
	out := make([]*runtimeapi.ContainerStatus, 0, len(ls))
	for _, l := range ls {
		l.c.mu.RLock()
		out = append(out, l.c.status())
		l.c.mu.RUnlock()
	}
	return out
}

// status is the container's ContainerStatus; the caller holds c.mu.
func (c *ctr) status() *runtimeapi.ContainerStatus {
	r := &c.rec
	st := &runtimeapi.ContainerStatus{
		Id:          r.ID,
		Metadata:    c.cfg.GetMetadata(),
		State:       criState(c),
		CreatedAt:   r.CreatedAt,
		StartedAt:   r.StartedAt,
		Image:       statusImage(c.cfg.GetImage()),
		ImageRef:    r.ImageRef,
		ImageId:     r.ImageID,
		Labels:      c.cfg.GetLabels(),
		Annotations: c.cfg.GetAnnotations(),
		Mounts:      statusMounts(c.cfg.GetMounts(), r.ImageVolumes),
		LogPath:     r.LogPath,
		StopSignal:  c.cfg.GetStopSignal(),
		User: &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{
			Uid: r.UID, Gid: r.GID, SupplementalGroups: r.Groups,
		}},
	}
	if c.resources != nil {
		st.Resources = &runtimeapi.ContainerResources{Linux: c.resources}
	}
	if e := r.Exit; e != nil && r.State == StateExited {
		st.FinishedAt = e.FinishedAt.UnixNano()
		st.ExitCode = int32(e.Code)
		st.Message = e.Message
		st.Reason = exitReason(r.Reason, e)
	}
	return st
}

// exitReason is the CRI reason of an exit: the record's override (berth
// decided how the container ended), else what the exit itself tells.
func exitReason(override string, e *monitor.Exit) string {
	switch {
	case override != "":
		return override
	case e.OOMKilled:
		return ReasonOOMKilled
	case e.Code == 0:
		return ReasonCompleted
	default:
		return ReasonError
	}
}

func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// stopSignal is the CRI config's stop signal, else the image's, else
// SIGTERM.
func (s *Service) stopSignal(c *ctr) (syscall.Signal, error) {
	if sig := c.cfg.GetStopSignal(); sig != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		if n := unix.SignalNum(strings.TrimPrefix(sig.String(), "SIGNAL_")); n != 0 {
			return n, nil
		}
		return 0, fmt.Errorf("%w: stop_signal: unknown signal %s", ErrInvalid, sig)
	}
	if name := c.snapshot().StopSignal; name != "" {
		return parseSignal(name)
	}
	return syscall.SIGTERM, nil
}

func parseSignal(name string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(name); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name = strings.ToUpper(name)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if n := unix.SignalNum(name); n != 0 {
		return n, nil
	}
	return 0, fmt.Errorf("%w: image stop signal %q", ErrInvalid, name)
}
