package network

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// DefaultNetwork describes the network berth writes when asked to and no
// CNI config exists: a bridge with a private pod subnet, masqueraded to
// the outside, with hostPort support, a FORWARD rule per pod and loopback.
type DefaultNetwork struct {
	Name   string // network name, also the file name
	Bridge string
	Subnet string
	// FollowPodCIDR makes the pod CIDR the kubelet sends the subnet
	// (Subnet must then be empty), as containerd's conf_template does:
	// nothing is written before it arrives, and the file is rewritten
	// when it changes.
	FollowPodCIDR bool
	// NoMasquerade leaves traffic leaving the bridge with the pod's own
	// source IP, for a node where something else masquerades (flannel's
	// --ip-masq) and pods on other nodes must see pod IPs.
	NoMasquerade bool
	// DataDir is host-local's lease dir; empty keeps the plugin default.
	DataDir string
}

// DefaultNetworkFile is the name of the file WriteDefault creates. The
// "10-" prefix sorts it before most hand-written configs, as is usual.
const DefaultNetworkFile = "10-berth.conflist"

// DefaultBridge, DefaultSubnet and DefaultName are the defaults' defaults.
const (
	DefaultName   = "berth"
	DefaultBridge = "berth0"
	DefaultSubnet = "10.88.0.0/16"
)

// ErrNoPodCIDR is why a default network that follows the pod CIDR is not
// ready before the kubelet sent one.
var ErrNoPodCIDR = errors.New("the default network waits for the node's pod CIDR, which the kubelet sends in UpdateRuntimeConfig")

// Conflist renders the default network configuration on its Subnet.
func (d DefaultNetwork) Conflist() ([]byte, error) {
	subnet := d.Subnet
	if subnet == "" {
		subnet = DefaultSubnet
	}
	return d.conflist(strings.Split(subnet, ","))
}

// conflist renders the network on subnets: one host-local range set
// each, so a dual-stack pod CIDR (v4,v6) gives every pod one address of
// each family, with the first address of each subnet the bridge's
// gateway (host-local's default).
func (d DefaultNetwork) conflist(subnets []string) ([]byte, error) {
	if d.Name == "" {
		d.Name = DefaultName
	}
	if d.Bridge == "" {
		d.Bridge = DefaultBridge
	}
	var ranges [][]map[string]string
	var routes []map[string]string
	families := map[string]bool{}
	for _, s := range subnets {
		_, subnet, err := net.ParseCIDR(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("default network subnet: %w", err)
		}
		dst := defaultRoute(subnet)
		if families[dst] {
			return nil, fmt.Errorf("default network subnets %s: at most one per IP family", strings.Join(subnets, ","))
		}
		families[dst] = true
		ranges = append(ranges, []map[string]string{{"subnet": subnet.String()}})
		routes = append(routes, map[string]string{"dst": dst})
	}
	if len(ranges) == 0 {
		return nil, errors.New("default network: no subnet")
	}
	ipam := map[string]any{"type": "host-local", "ranges": ranges, "routes": routes}
	if d.DataDir != "" {
		ipam["dataDir"] = d.DataDir
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       d.Name,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      d.Bridge,
				"isGateway":   true,
				"ipMasq":      !d.NoMasquerade,
				"hairpinMode": true,
				// A changed pod CIDR moves the bridge's gateway address to
				// the new subnet instead of failing every ADD because the
				// bridge holds the old one.
				"forceAddress": d.FollowPodCIDR,
				// No ipRanges capability: host-local would add the
				// kubelet's pod CIDR to this subnet rather than replace it,
				// giving pods two IPv4 addresses and the bridge two
				// gateways, which it refuses. FollowPodCIDR writes the
				// CIDR here instead.
				"ipam": ipam,
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
			map[string]any{"type": "loopback"},
			// Accepts the pod's traffic in FORWARD, where a host that runs
			// Docker has policy DROP and, with bridge netfilter on, even
			// pod-to-pod frames on the bridge pass. Last in the chain: an
			// ADD that fails after it would be undone by a DEL without a
			// previous result, from which it cannot tell which rules to
			// remove; a failure of its own it undoes itself.
			map[string]any{"type": "firewall"},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

func defaultRoute(subnet *net.IPNet) string {
	if subnet.IP.To4() != nil {
		return "0.0.0.0/0"
	}
	return "::/0"
}

// WriteDefault writes the default network into dir unless dir already
// holds a configuration. It reports whether it wrote, and where.
func WriteDefault(dir string, d DefaultNetwork) (string, bool, error) {
	files, err := confFiles(dir)
	if err != nil {
		return "", false, err
	}
	if len(files) > 0 {
		return files[0], false, nil
	}
	data, err := d.Conflist()
	if err != nil {
		return "", false, err
	}
	if err := writeConfAtomic(dir, DefaultNetworkFile, data); err != nil {
		return "", false, err
	}
	return filepath.Join(dir, DefaultNetworkFile), true, nil
}

// WriteDefaultForPodCIDRs writes the default network on the pod CIDRs
// into dir: when dir holds no configuration, or when the one in use is
// berth's own file and says something else. Another config in use is
// left alone, as WriteDefault leaves it. It reports the config in use
// and whether it wrote.
func WriteDefaultForPodCIDRs(dir string, d DefaultNetwork, cidrs []string) (string, bool, error) {
	data, err := d.conflist(cidrs)
	if err != nil {
		return "", false, err
	}
	files, err := confFiles(dir)
	if err != nil {
		return "", false, err
	}
	path := filepath.Join(dir, DefaultNetworkFile)
	if len(files) > 0 {
		if files[0] != path {
			return files[0], false, nil
		}
		old, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", false, fmt.Errorf("read default CNI network: %w", err)
		}
		if bytes.Equal(old, data) {
			return path, false, nil
		}
	}
	if err := writeConfAtomic(dir, DefaultNetworkFile, data); err != nil {
		return "", false, err
	}
	return path, true, nil
}

// writeConfAtomic writes a config aside and renames it into place, so a
// Status call (or another runtime sharing the dir) never loads half a
// file; the dot prefix keeps the temp file out of confFiles.
func writeConfAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create CNI conf dir: %w", err)
	}
	path := filepath.Join(dir, name)
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write CNI network %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write CNI network %s: %w", path, err)
	}
	return nil
}
