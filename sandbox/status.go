package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
)

// Info is what a pod's other users (containers, status) need to know.
type Info struct {
	ID         string
	State      State
	NetNS      string // pin path; empty for host network or once stopped
	PausePid   int    // 0 when pause is not running
	CgroupPath string // pause's, relative to the hierarchies' root
	// CgroupParent is where the pod's containers' cgroups go: beside
	// pause's, in the parent the kubelet gave (or berth's default).
	CgroupParent cgroup.Parent
	// Files containers of the pod mount: hostname, hosts, resolv.conf and
	// the shm directory (empty when the pod uses the host's IPC).
	Hostname, Hosts, Resolv, Shm string
	Config                       *runtimeapi.PodSandboxConfig
	// RuntimeHandler is the handler RunPodSandbox was given ("" the
	// default), kept in the pod's record.
	RuntimeHandler string
}

// Get returns a pod by id or unique id prefix.
func (m *Manager) Get(ctx context.Context, id string) (*Info, error) {
	p, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	rec, cfg := p.snapshot()
	pause, err := m.pauseCgroup(&rec, cfg)
	if err != nil {
		return nil, fmt.Errorf("pod sandbox %s: %w", rec.ID, err)
	}
	files := podFiles{dir: rec.Dir}
	info := &Info{
		ID: rec.ID, State: rec.State, NetNS: rec.NetNS, PausePid: rec.PausePid,
		CgroupPath: rec.CgroupPath, CgroupParent: pause.Parent(), Config: cfg,
		Hostname: files.Hostname(), Hosts: files.Hosts(), Resolv: files.Resolv(),
		RuntimeHandler: rec.RuntimeHandler,
	}
	if _, _, hostIPC := namespaces(cfg); !hostIPC {
		info.Shm = files.Shm()
	}
	return info, nil
}

func criState(s State) runtimeapi.PodSandboxState {
	if s == StateReady {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// Status is PodSandboxStatus: from memory, with the verbose info map when
// asked for.
func (m *Manager) Status(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatus, map[string]string, error) {
	p, err := m.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	rec, cfg := p.snapshot()
	st := &runtimeapi.PodSandboxStatus{
		Id:          rec.ID,
		Metadata:    cfg.GetMetadata(),
		State:       criState(rec.State),
		CreatedAt:   rec.CreatedAt,
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
		RuntimeHandler: rec.RuntimeHandler,
	}
	st.Network = &runtimeapi.PodSandboxNetworkStatus{}
	if rec.State == StateReady && len(rec.IPs) > 0 {
		st.Network.Ip = rec.IPs[0]
		for _, ip := range rec.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	if !verbose {
		return st, nil, nil
	}
	info, err := json.Marshal(verboseInfo{
		ID: rec.ID, State: rec.State, Pid: rec.PausePid, NetNS: rec.NetNS, IPs: rec.IPs,
		CgroupPath: rec.CgroupPath, Dir: rec.Dir, Hostname: rec.Hostname,
		RuntimeHandler: rec.RuntimeHandler, Config: cfg,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("pod %s: verbose info: %w", rec.ID, err)
	}
	return st, map[string]string{"info": string(info)}, nil
}

type verboseInfo struct {
	ID             string                       `json:"id"`
	State          State                        `json:"state"`
	Pid            int                          `json:"pid"`
	NetNS          string                       `json:"netNamespacePath"`
	IPs            []string                     `json:"ips,omitempty"`
	CgroupPath     string                       `json:"cgroupPath"`
	Dir            string                       `json:"stateDir"`
	Hostname       string                       `json:"hostname"`
	RuntimeHandler string                       `json:"runtimeHandler"`
	Config         *runtimeapi.PodSandboxConfig `json:"config"`
}

// List is ListPodSandbox with every CRI filter: id (or id prefix), state
// and label selector. Newest first.
func (m *Manager) List(ctx context.Context, f *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	ls := m.listed(f)
	out := make([]*runtimeapi.PodSandbox, 0, len(ls))
	for _, l := range ls {
		out = append(out, listItem(&l.rec, l.cfg, l.state))
	}
	return out
}

// ListResponse is List as the response the CRI server sends, with each
// item already encoded: the kubelet lists every pod every second (PLEG),
// and encoding the items' labels and annotations (maps) is most of what
// such a call costs berth. Each pod keeps its item encoded until its state
// changes, and the response carries the items as pre-encoded field 1
// (items) in its unknown fields, which protobuf writes out as they are: on
// the wire it is the same message, and a client decodes the items as
// usual. In memory its Items is empty: use List to read them.
func (m *Manager) ListResponse(ctx context.Context, f *runtimeapi.PodSandboxFilter) *runtimeapi.ListPodSandboxResponse {
	ls := m.listed(f)
	size := 0
	wires := make([][]byte, len(ls))
	for i, l := range ls {
		wires[i] = l.p.encodedItem(&l.rec, l.cfg, l.state)
		size += len(wires[i])
	}
	raw := make([]byte, 0, size)
	for _, w := range wires {
		raw = append(raw, w...)
	}
	resp := &runtimeapi.ListPodSandboxResponse{}
	if len(raw) > 0 {
		resp.ProtoReflect().SetUnknown(raw)
	}
	return resp
}

// listEntry is a pod's encoded ListPodSandbox item, for one state (the
// only part of an item that changes).
type listEntry struct {
	state runtimeapi.PodSandboxState
	wire  []byte // tag and length of field "items", then the PodSandbox
}

// itemsField is the field number of ListPodSandboxResponse.items.
var itemsField = (&runtimeapi.ListPodSandboxResponse{}).ProtoReflect().Descriptor().Fields().ByName("items").Number()

func (p *pod) encodedItem(rec *Record, cfg *runtimeapi.PodSandboxConfig, state runtimeapi.PodSandboxState) []byte {
	if e := p.listed.Load(); e != nil && e.state == state {
		return e.wire
	}
	b, err := proto.Marshal(listItem(rec, cfg, state))
	if err != nil {
		// Cannot happen with these types; an empty item is still valid.
		b = nil
	}
	wire := protowire.AppendTag(make([]byte, 0, len(b)+8), itemsField, protowire.BytesType)
	wire = protowire.AppendBytes(wire, b)
	p.listed.Store(&listEntry{state: state, wire: wire})
	return wire
}

func listItem(rec *Record, cfg *runtimeapi.PodSandboxConfig, state runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id:             rec.ID,
		Metadata:       cfg.GetMetadata(),
		State:          state,
		CreatedAt:      rec.CreatedAt,
		Labels:         cfg.GetLabels(),
		Annotations:    cfg.GetAnnotations(),
		RuntimeHandler: rec.RuntimeHandler,
	}
}

type listedPod struct {
	p     *pod
	rec   Record
	cfg   *runtimeapi.PodSandboxConfig
	state runtimeapi.PodSandboxState
}

// listed returns the pods that match f, newest first.
func (m *Manager) listed(f *runtimeapi.PodSandboxFilter) []listedPod {
	m.mu.RLock()
	pods := make([]*pod, 0, len(m.pods))
	for id, p := range m.pods {
		if f.GetId() != "" && !strings.HasPrefix(id, f.GetId()) {
			continue
		}
		pods = append(pods, p)
	}
	m.mu.RUnlock()
	out := make([]listedPod, 0, len(pods))
	for _, p := range pods {
		rec, cfg := p.snapshot()
		state := criState(rec.State)
		if f.GetState() != nil && f.GetState().GetState() != state {
			continue
		}
		if !matchLabels(cfg.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		out = append(out, listedPod{p: p, rec: rec, cfg: cfg, state: state})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rec.CreatedAt > out[j].rec.CreatedAt })
	return out
}

func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
