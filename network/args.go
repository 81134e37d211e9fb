package network

import (
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// Pod is what CNI needs to know about a pod.
type Pod struct {
	ID        string // sandbox id, the CNI container id
	Name      string
	Namespace string
	UID       string
	NetNS     string // pinned netns path
	// CgroupPath is the pod's cgroup parent, for plugins (bandwidth,
	// some eBPF ones) that attach to it.
	CgroupPath   string
	PortMappings []PortMapping
	DNS          *DNS
}

// PortMapping is one hostPort of the pod (the portMappings capability).
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"` // tcp, udp or sctp
	HostIP        string `json:"hostIP,omitempty"`
}

// DNS is the pod's resolver config (the dns capability).
type DNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

type ipRange struct {
	Subnet string `json:"subnet"`
}

// runtimeConf builds the CNI invocation for pod. CNI_ARGS carries the
// kubelet's identity of the pod (IgnoreUnknown so plugins that do not know
// these keys accept them); capability args are offered to every plugin and
// libcni passes each only to the plugins that declare it.
func (c *CNI) runtimeConf(pod *Pod, netns string) *libcni.RuntimeConf {
	caps := map[string]any{}
	if len(pod.PortMappings) > 0 {
		var pms []PortMapping
		for _, pm := range pod.PortMappings {
			// A containerPort without hostPort is informational:
			// portmap rejects it.
			if pm.HostPort <= 0 {
				continue
			}
			pm.Protocol = strings.ToLower(pm.Protocol)
			if pm.Protocol == "" {
				pm.Protocol = "tcp"
			}
			pms = append(pms, pm)
		}
		if len(pms) > 0 {
			caps["portMappings"] = pms
		}
	}
	if pod.DNS != nil {
		caps["dns"] = *pod.DNS
	}
	if cidrs := c.PodCIDRs(); len(cidrs) > 0 {
		ranges := make([][]ipRange, 0, len(cidrs))
		for _, cidr := range cidrs {
			ranges = append(ranges, []ipRange{{Subnet: cidr}})
		}
		caps["ipRanges"] = ranges
	}
	if pod.CgroupPath != "" {
		caps["cgroupPath"] = pod.CgroupPath
	}
	return &libcni.RuntimeConf{
		ContainerID: pod.ID,
		NetNS:       netns,
		IfName:      c.cfg.IfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", pod.Namespace},
			{"K8S_POD_NAME", pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", pod.ID},
			{"K8S_POD_UID", pod.UID},
		},
		CapabilityArgs: caps,
	}
}
