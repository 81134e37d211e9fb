package container

import (
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/monitor"
)

// State is a container's lifecycle state.
type State string

const (
	// StateCreating is only ever seen on disk, after a crash during
	// CreateContainer: recovery undoes such a container.
	StateCreating State = "creating"
	StateCreated  State = "created"
	StateRunning  State = "running"
	StateExited   State = "exited"
)

// Record is what is persisted of a container. It names every resource the
// container holds so that remove and recovery can release each one.
type Record struct {
	ID         string        `json:"id"`
	PodID      string        `json:"podId"`
	Config     []byte        `json:"config"` // runtimeapi.ContainerConfig, protobuf
	State      State         `json:"state"`
	ImageID    string        `json:"imageId"`
	ImageRef   string        `json:"imageRef"`
	CreatedAt  int64         `json:"createdAt"`
	StartedAt  int64         `json:"startedAt,omitempty"`
	Dir        string        `json:"dir"`   // state dir: spec, exit file, rootfs mountpoint
	Upper      string        `json:"upper"` // persistent dir: overlay upper and work
	LogPath    string        `json:"logPath,omitempty"`
	Pid        int           `json:"pid,omitempty"`
	PidStart   uint64        `json:"pidStart,omitempty"`
	StopSignal string        `json:"stopSignal,omitempty"` // the image's
	UID        int64         `json:"uid"`
	GID        int64         `json:"gid"`
	Groups     []int64       `json:"groups,omitempty"`
	Resources  []byte        `json:"resources,omitempty"` // runtimeapi.LinuxContainerResources, protobuf
	Exit       *monitor.Exit `json:"exit,omitempty"`
	// Reason overrides the exit's reason when berth, not the process,
	// decided how the container ended.
	Reason string `json:"reason,omitempty"`
	// ImageVolumes are the container's image mounts, listed from the
	// record's first write (ImageID filled in once leased).
	ImageVolumes []ImageVolume `json:"imageVolumes,omitempty"`
	// Sandbox marks the pod's infra container (pause from an image, its id
	// the pod's): the pod sandbox owns it, and no CRI container call sees
	// it.
	Sandbox bool `json:"sandbox,omitempty"`
	// Restore marks a container made from a checkpoint archive: its
	// start restores the checkpointed process tree (restore.go).
	Restore bool `json:"restore,omitempty"`
	// TCPEstablished marks a container made from an archive whose dump
	// holds established TCP connections: until it is restored, its pod's
	// loopback sends no resets (reset_hold.go).
	TCPEstablished bool `json:"tcpEstablished,omitempty"`
}

// ctr is one container in memory.
type ctr struct {
	// op serialises the calls that change the container; queries take mu.
	op sync.Mutex

	mu        sync.RWMutex
	rec       Record
	cfg       *runtimeapi.ContainerConfig // immutable
	resources *runtimeapi.LinuxContainerResources
	spec      []byte // the OCI spec, for verbose status
	exited    chan struct{}
	removed   bool

	cgroupOnce sync.Once
	cgroup     string // from the spec, on first use (stats.go)

	// starting is set while StartContainer waits for the monitor; an exit
	// seen meanwhile is reported after the start (stopPending), so that
	// events come in the order things happened.
	starting, stopPending bool

	// listed is the container's ListContainers item, encoded (list.go).
	listed atomic.Pointer[listEntry]
}

func (c *ctr) snapshot() Record {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rec
}

func (c *ctr) isExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

func decodeConfig(b []byte) (*runtimeapi.ContainerConfig, error) {
	cfg := &runtimeapi.ContainerConfig{}
	return cfg, proto.Unmarshal(b, cfg)
}

func decodeResources(b []byte) *runtimeapi.LinuxContainerResources {
	if b == nil {
		return nil
	}
	r := &runtimeapi.LinuxContainerResources{}
	if proto.Unmarshal(b, r) != nil {
		return nil
	}
	return r
}
