package runtimeharness

import (
	"fmt"
	"strings"
)

// NRI is the NRI section of a runtime's configuration: a socket of the
// run's own and no pre-installed plugins.
type NRI struct {
	Socket, PluginPath, PluginConfigPath string
	// RequestTimeout is NRI's plugin_request_timeout ("10s"); "": the
	// runtime's default.
	RequestTimeout string
}

// BerthConfig is a berth daemon's configuration on a run's temp roots;
// TOML renders it as berth's config.toml. An empty field is berth's
// default.
type BerthConfig struct {
	Socket, Root, State string
	LogLevel            string
	CgroupDriver        string
	PodProcess          string
	RegistryConfigPath  string

	CNIConfDir, CNIBinDir string
	// DefaultBridge and DefaultSubnet, when set, have berth write its
	// default network on them into CNIConfDir.
	DefaultBridge, DefaultSubnet string

	NRI *NRI // nil: berth's default

	// Registry is the test registry (host:port) that every registry in
	// Mirrored is sent to, over plain HTTP.
	Registry string
	Mirrored []string
	// RuntimeHandlers are extra runtime handlers with berth's default
	// settings (the e2e suites' "test-handler").
	RuntimeHandlers []string
}

// TOML renders the configuration.
func (c BerthConfig) TOML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "address = %q\nroot = %q\nstate = %q\n", c.Socket, c.Root, c.State)
	for _, kv := range [][2]string{
		{"log_level", c.LogLevel}, {"cgroup_driver", c.CgroupDriver},
		{"pod_process", c.PodProcess}, {"registry_config_path", c.RegistryConfigPath},
	} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "%s = %q\n", kv[0], kv[1])
		}
	}
	fmt.Fprintf(&b, "\n[cni]\nconf_dir = %q\nbin_dirs = [%q]\n", c.CNIConfDir, c.CNIBinDir)
	if c.DefaultBridge != "" {
		fmt.Fprintf(&b, "default_network = true\ndefault_bridge = %q\ndefault_subnet = %q\n", c.DefaultBridge, c.DefaultSubnet)
	}
	if n := c.NRI; n != nil {
		fmt.Fprintf(&b, "\n[nri]\nenable = true\nsocket_path = %q\nplugin_path = %q\nplugin_config_path = %q\n", n.Socket, n.PluginPath, n.PluginConfigPath)
		if n.RequestTimeout != "" {
			fmt.Fprintf(&b, "plugin_request_timeout = %q\n", n.RequestTimeout)
		}
	}
	b.WriteString("\n")
	for _, h := range c.Mirrored {
		fmt.Fprintf(&b, "[registries.%q]\nmirrors = [%q]\n", h, "http://"+c.Registry)
	}
	for _, h := range c.RuntimeHandlers {
		fmt.Fprintf(&b, "\n[runtimes.%q]\n", h)
	}
	return b.String()
}
