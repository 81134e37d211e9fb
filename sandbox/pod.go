package sandbox

import (
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network"
)

// State is a pod's lifecycle state.
type State string

const (
	// StateCreating is a pod whose RunPodSandbox has not finished. It is
	// only ever seen on disk, after a crash: recovery undoes such a pod.
	StateCreating State = "creating"
	StateReady    State = "ready"
	// StateNotReady is a stopped pod, or one whose pause died.
	StateNotReady State = "notready"
)

// Record is what is persisted of a pod. It names every resource the pod
// may hold, so that stop, remove and recovery can release each one
// whatever point the pod reached.
type Record struct {
	ID             string `json:"id"`
	Config         []byte `json:"config"` // runtimeapi.PodSandboxConfig, protobuf
	RuntimeHandler string `json:"runtimeHandler,omitempty"`
	State          State  `json:"state"`
	CreatedAt      int64  `json:"createdAt"` // unix ns
	Dir            string `json:"dir"`
	CgroupPath     string `json:"cgroupPath"`
	// Cgroup is pause's cgroup as an OCI cgroupsPath in the driver's form
	// (cgroup.Cgroup.SpecPath): what removal and recovery open again, and
	// whose parent holds the pod's containers. Empty in records of older
	// versions.
	Cgroup string `json:"cgroup,omitempty"`
	// NetNS is the pin path while the pin exists; empty for a host
	// network pod.
	NetNS string `json:"netns,omitempty"`
	// Attached is set from just before CNI ADD until DEL succeeded.
	Attached bool     `json:"attached,omitempty"`
	IPs      []string `json:"ips,omitempty"`
	Hostname string   `json:"hostname,omitempty"`
	// PausePid and PauseStart identify pause while it may be running.
	PausePid   int    `json:"pausePid,omitempty"`
	PauseStart uint64 `json:"pauseStart,omitempty"`
}

// pod is the in-memory state of one sandbox.
type pod struct {
	// op serialises the operations that change the pod (stop, remove, the
	// pause watcher); queries take only mu.
	op opLock
	// del is the pod's CNI DEL while it runs, under op: it goes on when
	// its caller gives up, and the next stop waits for it instead of
	// starting another.
	del *cniDel

	mu      sync.RWMutex
	rec     Record
	cfg     *runtimeapi.PodSandboxConfig // immutable once set
	pause   *Process
	removed bool

	// listed is the pod's ListPodSandbox item, encoded (see encodedItem).
	listed atomic.Pointer[listEntry]
}

func (p *pod) snapshot() (Record, *runtimeapi.PodSandboxConfig) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	rec := p.rec
	rec.IPs = append([]string(nil), p.rec.IPs...)
	return rec, p.cfg
}

func (p *pod) update(f func(*Record)) Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.rec)
	return p.rec
}

func decodeConfig(b []byte) (*runtimeapi.PodSandboxConfig, error) {
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := proto.Unmarshal(b, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func namespaces(cfg *runtimeapi.PodSandboxConfig) (hostNet, hostPID, hostIPC bool) {
	o := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	return o.GetNetwork() == runtimeapi.NamespaceMode_NODE,
		o.GetPid() == runtimeapi.NamespaceMode_NODE,
		o.GetIpc() == runtimeapi.NamespaceMode_NODE
}

// userNamespace is the pod's own user namespace (mode POD), nil when it
// shares the node's (no options at all too, although the zero mode is
// POD). The server has checked its mappings.
func userNamespace(cfg *runtimeapi.PodSandboxConfig) *runtimeapi.UserNamespace {
	u := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if u == nil || u.GetMode() != runtimeapi.NamespaceMode_POD {
		return nil
	}
	return u
}

// networkPod is what CNI is told about the pod.
func networkPod(rec *Record, cfg *runtimeapi.PodSandboxConfig) *network.Pod {
	md := cfg.GetMetadata()
	np := &network.Pod{
		ID:         rec.ID,
		Name:       md.GetName(),
		Namespace:  md.GetNamespace(),
		UID:        md.GetUid(),
		NetNS:      rec.NetNS,
		CgroupPath: cfg.GetLinux().GetCgroupParent(),
	}
	for _, pm := range cfg.GetPortMappings() {
		np.PortMappings = append(np.PortMappings, network.PortMapping{
			HostPort:      pm.GetHostPort(),
			ContainerPort: pm.GetContainerPort(),
			Protocol:      protocolName(pm.GetProtocol()),
			HostIP:        pm.GetHostIp(),
		})
	}
	if d := cfg.GetDnsConfig(); d != nil {
		np.DNS = &network.DNS{Servers: d.GetServers(), Searches: d.GetSearches(), Options: d.GetOptions()}
	}
	return np
}

func protocolName(p runtimeapi.Protocol) string {
	switch p {
	case runtimeapi.Protocol_UDP:
		return "udp"
	case runtimeapi.Protocol_SCTP:
		return "sctp"
	default:
		return "tcp"
	}
}
