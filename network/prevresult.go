package network

import (
	"encoding/json"
	"fmt"
	"net"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// withLostResult returns list with a prevResult naming the addresses the
// pod's interface holds, for a DEL that libcni has no cached ADD result
// for. That happens when the ADD never finished: it failed half-way, or
// berth was killed while a plugin ran and the plugin finished on its own.
// Plugins that undo per-address state keyed on prevResult alone (the
// firewall plugin's per-pod FORWARD rules) would otherwise undo nothing and
// leak it for good; IPAM releases by container id and needs none of this.
// When the netns is gone, or holds no address, list is returned as is:
// then no plugin got as far as to use one.
func (c *CNI) withLostResult(list *libcni.NetworkConfigList, netns string) *libcni.NetworkConfigList {
	if netns == "" {
		return list
	}
	addrs, err := interfaceAddrs(netns, c.cfg.IfName)
	if err != nil || len(addrs) == 0 {
		return list
	}
	prev := map[string]any{"cniVersion": list.CNIVersion, "ips": addrs}
	out := *list
	out.Plugins = make([]*libcni.PluginConfig, 0, len(list.Plugins))
	for _, p := range list.Plugins {
		var conf map[string]any
		if err := json.Unmarshal(p.Bytes, &conf); err != nil {
			return list
		}
		if _, ok := conf["prevResult"]; !ok {
			conf["prevResult"] = prev
		}
		b, err := json.Marshal(conf)
		if err != nil {
			return list
		}
		out.Plugins = append(out.Plugins, &libcni.PluginConfig{Network: p.Network, Bytes: b})
	}
	return &out
}

// interfaceAddrs lists the global unicast addresses of ifName inside the
// network namespace pinned at netns, as CNI result IPs. Link-local
// addresses are the kernel's own, never IPAM's.
func interfaceAddrs(netns, ifName string) ([]current.IPConfig, error) {
	var out []current.IPConfig
	err := Do(netns, func() error {
		iface, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			out = append(out, current.IPConfig{Address: *ipn})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("addresses of %s in %s: %w", ifName, netns, err)
	}
	return out, nil
}
