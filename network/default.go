package network

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// DefaultNetwork describes the network berth writes when asked to and no
// CNI config exists: a bridge with a private pod subnet, masqueraded to
// the outside, with hostPort support and loopback.
type DefaultNetwork struct {
	Name   string // network name, also the file name
	Bridge string
	Subnet string
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

// Conflist renders the default network configuration.
func (d DefaultNetwork) Conflist() ([]byte, error) {
	if d.Name == "" {
		d.Name = DefaultName
	}
	if d.Bridge == "" {
		d.Bridge = DefaultBridge
	}
	if d.Subnet == "" {
		d.Subnet = DefaultSubnet
	}
	_, subnet, err := net.ParseCIDR(d.Subnet)
	if err != nil {
		return nil, fmt.Errorf("default network subnet: %w", err)
	}
	ipam := map[string]any{
		"type":   "host-local",
		"ranges": [][]map[string]string{{{"subnet": subnet.String()}}},
		"routes": []map[string]string{{"dst": defaultRoute(subnet)}},
	}
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
				"ipMasq":      true,
				"hairpinMode": true,
				// No ipRanges capability: host-local would add the
				// kubelet's pod CIDR to this subnet rather than replace it,
				// giving pods two IPv4 addresses and the bridge two
				// gateways, which it refuses.
				"ipam": ipam,
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
			map[string]any{"type": "loopback"},
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("create CNI conf dir: %w", err)
	}
	// Written aside and renamed, so a Status call never loads half a file.
	path := filepath.Join(dir, DefaultNetworkFile)
	tmp := filepath.Join(dir, ".tmp-"+DefaultNetworkFile)
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return "", false, fmt.Errorf("write default CNI network: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", false, fmt.Errorf("write default CNI network: %w", err)
	}
	return path, true, nil
}
