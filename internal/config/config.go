// Package config defines the berth daemon configuration: a TOML file with
// snake_case keys, overridden by command-line flags.
//
// Everything about a key lives in its struct field: the TOML name, the flag
// name, the validation and the documentation printed by `berth config
// default`. Adding a key means adding a field here and its default in
// Default; loading, flags, validation and the default file follow from the
// tags:
//
//	toml:"name"      key name (required on every field)
//	flag:"name"      command-line flag, if the key has one
//	check:"a b"      space-separated checks, see checks in validate.go
//	doc:"text"       comment printed above the key and used as flag usage
//	secret:"true"    value is redacted wherever the config is shown
package config

// DefaultPath is read when --config is not given; unlike an explicit
// --config, it may be missing.
const DefaultPath = "/etc/berth/config.toml"

// Cgroup drivers.
const (
	CgroupDriverCgroupfs = "cgroupfs"
	CgroupDriverSystemd  = "systemd"
)

// Config is the daemon configuration.
type Config struct {
	Address        string   `toml:"address" flag:"address" check:"required abs" doc:"Unix socket the CRI services are served on (a unix:// prefix is accepted)."`
	Root           string   `toml:"root" flag:"root" check:"required abs" doc:"Persistent state: image content, unpacked layers, image metadata."`
	State          string   `toml:"state" flag:"state" check:"required abs" doc:"Volatile state (should be on tmpfs): pod and container records, network namespace pins, the lock file."`
	CgroupDriver   string   `toml:"cgroup_driver" flag:"cgroup-driver" check:"oneof=cgroupfs|systemd" doc:"Cgroup driver reported to the kubelet and used for pods: cgroupfs (berth writes the cgroup tree) or systemd (pods and containers are transient systemd scopes made over D-Bus; berth refuses to start where systemd does not answer)."`
	LogLevel       string   `toml:"log_level" flag:"log-level" check:"oneof=debug|info|warn|error" doc:"Log level: debug, info, warn or error. debug logs every CRI call."`
	LogFormat      string   `toml:"log_format" flag:"log-format" check:"oneof=text|json" doc:"Log format on stderr: text or json."`
	MetricsAddress string   `toml:"metrics_address" flag:"metrics-address" check:"hostport" doc:"host:port to serve Prometheus metrics on at /metrics; empty disables them."`
	StreamAddress  string   `toml:"stream_address" flag:"stream-address" check:"required hostport" doc:"host:port of the streaming server (exec, attach, port-forward URLs); port 0 picks a free port. The URLs name this host, so it must be an address the kubelet reaches, not 0.0.0.0."`
	SocketGroup    string   `toml:"socket_group" flag:"socket-group" doc:"Group name or numeric gid that owns the socket (mode 0660); empty keeps root."`
	PauseImage     string   `toml:"pause_image" flag:"pause-image" doc:"Image run as every pod's infra (pause) container instead of the pause built into berth, e.g. registry.k8s.io/pause:3.10; pulled (through the registry mirrors) when a pod needs it and it is missing."`
	PodProcess     string   `toml:"pod_process" flag:"pod-process" check:"oneof=monitor|podproc" doc:"The process each new pod gets as its own (parent of its containers, writer of their logs and exits): monitor, the Go monitor (berth-monitor), or podproc, the small C process (berth-podproc, installed next to berth-monitor; docs/podproc.md), the default. A pod keeps the kind it was made with across restarts and upgrades."`
	PinnedImages   []string `toml:"pinned_images" doc:"Image references (or image IDs) always reported pinned, so that the kubelet's image garbage collection never removes them, whatever their records say. pause_image is pinned too, and so is every image imported with berth images import --pinned."`
	CNI            CNI      `toml:"cni" doc:"Pod networking with CNI plugins."`
	EnableCDI      bool     `toml:"enable_cdi" flag:"enable-cdi" doc:"Give containers the CDI (Container Device Interface) devices their config names, in cdi_devices or in cdi.k8s.io/ annotations, as device plugins and DRA drivers hand them out; off, the names are ignored (as containerd's enable_cdi). See docs/containers.md."`
	CDISpecDirs    []string `toml:"cdi_spec_dirs" flag:"cdi-spec-dir" check:"abs" doc:"Directories of CDI spec files (*.json, *.yaml), lowest priority first: a device a later directory defines wins. Reread when a create names a CDI device and a file changed, so files written after start count; an empty list means the default."`
	Tracing        Tracing  `toml:"tracing" doc:"OpenTelemetry traces of the CRI calls and of the steps inside them (netns, CNI, monitor and pause, rootfs, libcontainer, image pulls), exported over OTLP gRPC, as the kubelet's, containerd's and CRI-O's. A call continues the trace its caller sends (the kubelet does when its own tracing is on). See docs/tracing.md."`
	NRI            NRI      `toml:"nri" doc:"NRI (Node Resource Interface) plugins, as in containerd and CRI-O: they see every pod and container event and may adjust containers as they are created (devices, mounts, environment, resources...) and update them later. See docs/nri.md."`

	ImagePullStallTimeout  string              `toml:"image_pull_stall_timeout" flag:"image-pull-stall-timeout" check:"duration" doc:"A pull fails when a registry sends nothing for this long (a Go duration such as 1m or 30s; 0 disables the check)."`
	MaxConcurrentDownloads int                 `toml:"max_concurrent_downloads" flag:"max-concurrent-downloads" doc:"Image layers downloaded at the same time, across all pulls."`
	Registries             map[string]Registry `toml:"registries" doc:"Per-registry settings, one table per registry host as images name it (docker.io, registry.k8s.io, 127.0.0.1:5000). mirrors: URLs tried in order before the registry itself (http://host:port or https://host). insecure: allow plain HTTP and unverified TLS (the default for localhost and 127.0.0.0/8). username and password, or auth (base64 of user:password): credentials used when the kubelet sends none for this host. For example:\n[registries.\"registry.k8s.io\"]\nmirrors = [\"http://127.0.0.1:5000\"]\n[registries.\"127.0.0.1:5000\"]\ninsecure = true"`
	DefaultRuntime         string              `toml:"default_runtime" flag:"default-runtime" check:"required" doc:"The entry of runtimes whose settings pods get when the kubelet names no runtime handler (the handler \"\", which is not configured itself), as containerd's default_runtime_name."`
	Runtimes               map[string]Runtime  `toml:"runtimes" doc:"Runtime handlers, one table per name a RuntimeClass's handler may give (a DNS label); the kubelet learns them from Status. Every handler runs pods with berth's own runtime (libcontainer under the pod's monitor), with the settings of its table; RunPodSandbox with a handler not listed here fails. A table given here replaces the built-in one of that name; the built-in runc and berth stay unless replaced. The Kubernetes e2e suites' RuntimeClass and PodOverhead specs need a handler named test-handler, which kind's node image and containerd's and CRI-O's test configurations add the same way:\n[runtimes.test-handler]"`
	RegistryConfigPath     string              `toml:"registry_config_path" flag:"registry-config-path" check:"abs" doc:"Directory of registry host configurations in containerd's format (its config_path; kind nodes use /etc/containerd/certs.d): <host>/hosts.toml (or <host>_<port>_/hosts.toml) and _default/hosts.toml with server, [host.\"URL\"] tables, capabilities, skip_verify, ca, client, header and override_path. Read on each pull, so files written after start count; a file that does not parse fails the pull naming it. A host's own hosts.toml wins over its [registries] mirrors, which win over _default/hosts.toml; [registries] credentials and insecure apply to every host a pull asks. Empty reads none. See docs/images.md."`
}

// Registry configures pulls from one registry host.
type Registry struct {
	Mirrors       []string `toml:"mirrors" check:"mirror" doc:"Mirror URLs (http://host:port, https://host), tried in order before the registry itself."`
	Insecure      bool     `toml:"insecure" doc:"Allow plain HTTP and unverified TLS; loopback hosts are insecure by default."`
	Username      string   `toml:"username" doc:"User name sent when the pull request carries no credentials for this host."`
	Password      string   `toml:"password" secret:"true" doc:"Password for username."`
	Auth          string   `toml:"auth" secret:"true" doc:"base64 of user:password, as in ~/.docker/config.json; instead of username and password."`
	IdentityToken string   `toml:"identity_token" secret:"true" doc:"OAuth2 refresh token, as in ~/.docker/config.json."`
}

// Runtime is one runtime handler's settings: what containerd's
// [plugins.cri.containerd.runtimes.NAME] and CRI-O's
// [crio.runtime.runtimes.NAME] offer that berth's single runtime can honour.
type Runtime struct {
	PrivilegedWithoutHostDevices bool     `toml:"privileged_without_host_devices" doc:"A privileged container of this handler's pods gets none of the host's devices (only the default /dev and the devices its config asks for, the device cgroup of an unprivileged container), as in containerd and CRI-O: for handlers whose privileged pods must not reach the host's disks."`
	DisableUserNamespaces        bool     `toml:"disable_user_namespaces" doc:"Pods of this handler cannot have a user namespace of their own: Status reports the handler without user_namespaces (the kubelet then refuses hostUsers: false pods of its RuntimeClass) and RunPodSandbox refuses such a pod."`
	DisableRecursiveReadOnly     bool     `toml:"disable_recursive_read_only_mounts" doc:"Containers of this handler's pods get no recursive read-only mounts: Status reports the handler without recursive_read_only_mounts (the kubelet then refuses recursiveReadOnly: Enabled for its RuntimeClass) and CreateContainer refuses a mount asking for one."`
	DefaultAnnotations           []string `toml:"default_annotations" check:"annotation" doc:"Annotations (key=value) put on the OCI spec of every container of this handler's pods, as CRI-O's default_annotations; an annotation of the container's own config with the same key wins."`
}

// Handler is the settings of a runtime handler name as RunPodSandbox gets
// it: "" is default_runtime's. ok is false for a handler not configured.
func (c *Config) Handler(name string) (rt Runtime, ok bool) {
	if name == "" {
		name = c.DefaultRuntime
	}
	rt, ok = c.Runtimes[name]
	return rt, ok
}

// CNI configures pod networking.
type CNI struct {
	ConfDir string   `toml:"conf_dir" flag:"cni-conf-dir" check:"required abs" doc:"Directory holding CNI network configurations (*.conf, *.conflist, *.json)."`
	BinDirs []string `toml:"bin_dirs" flag:"cni-bin-dir" check:"abs" doc:"Directories searched for CNI plugin binaries, in order."`
	// The default network lets berth run pods on a bare host: a bridge
	// with a private subnet, masqueraded, with hostPort support.
	DefaultNetwork    bool   `toml:"default_network" flag:"default-network" doc:"When conf_dir holds no network config at start, write a default one (10-berth.conflist): a bridge (default_bridge) with host-local IPs from default_subnet (or the pod CIDR, see default_pod_cidr), masquerade (default_masquerade), portmap, loopback and the firewall plugin, which accepts pod traffic in FORWARD (a host running Docker has policy DROP there)."`
	DefaultBridge     string `toml:"default_bridge" flag:"default-network-bridge" check:"ifname" doc:"Bridge of the default network; empty means berth0. The bridge holds the first address of each subnet, the pods' gateway."`
	DefaultSubnet     string `toml:"default_subnet" flag:"default-network-subnet" check:"cidr" doc:"Pod subnet of the default network; empty means 10.88.0.0/16. Not with default_pod_cidr."`
	DefaultPodCIDR    bool   `toml:"default_pod_cidr" flag:"default-network-pod-cidr" doc:"The default network's subnet is the pod CIDR the kubelet sends (UpdateRuntimeConfig), as containerd's conf_template: nothing is written, and NetworkReady is false with a message saying so, until it arrives; 10-berth.conflist is rewritten atomically if it changes (another config in use is left alone). Needs default_network; excludes default_subnet."`
	DefaultMasquerade bool   `toml:"default_masquerade" flag:"default-network-masquerade" doc:"Masquerade traffic from the default network's pods to outside its subnet (the bridge plugin's ipMasq). false where something else masquerades, as flannel's --ip-masq in a kind node, so that pods on other nodes see pod source IPs."`
}

// Tracing configures the export of traces.
type Tracing struct {
	Enable                 bool   `toml:"enable" flag:"tracing" doc:"Export traces; off by default, and off costs nothing."`
	Endpoint               string `toml:"endpoint" flag:"tracing-endpoint" check:"required hostport" doc:"host:port of the OTLP gRPC collector: plain text on a loopback address, TLS with the system's roots elsewhere (unless insecure)."`
	Insecure               bool   `toml:"insecure" doc:"Plain text to a collector that is not on a loopback address."`
	SamplingRatePerMillion int    `toml:"sampling_rate_per_million" flag:"tracing-sampling-rate-per-million" doc:"Traces per million that berth starts itself (calls whose caller sent no trace context) that are recorded, 0 to 1000000. A call whose caller sent one follows its caller's decision, so with the kubelet's own samplingRatePerMillion set, 0 here records what the kubelet records."`
}

// NRI configures NRI plugin support.
type NRI struct {
	Enable                    bool   `toml:"enable" flag:"nri" doc:"Run NRI: start the plugins of plugin_path and accept external plugins on socket_path. Off by default: the socket path is shared by every runtime of the host (containerd's default is the same path, and the socket is replaced at start)."`
	SocketPath                string `toml:"socket_path" flag:"nri-socket" check:"abs" doc:"Unix socket external NRI plugins connect to."`
	PluginPath                string `toml:"plugin_path" check:"abs" doc:"Directory of pre-installed NRI plugins (executables named <index>-<name>), started by berth."`
	PluginConfigPath          string `toml:"plugin_config_path" check:"abs" doc:"Directory of the pre-installed plugins' configuration files (<index>-<name>.conf or <name>.conf)."`
	DisableConnections        bool   `toml:"disable_connections" doc:"Refuse external plugins: only those of plugin_path run, and no socket is created."`
	PluginRegistrationTimeout string `toml:"plugin_registration_timeout" check:"duration" doc:"How long a plugin may take to register once connected (a Go duration)."`
	PluginRequestTimeout      string `toml:"plugin_request_timeout" check:"duration" doc:"How long a plugin may take to answer one request (a Go duration); a plugin that does not answer in time is disconnected, and the request goes on without it."`
}

// Default returns the built-in configuration, the base that the file and
// the flags override.
func Default() *Config {
	return &Config{
		Address:        "/run/berth/berth.sock",
		Root:           "/var/lib/berth",
		State:          "/run/berth",
		CgroupDriver:   CgroupDriverCgroupfs,
		PodProcess:     "podproc",
		LogLevel:       "info",
		LogFormat:      "text",
		MetricsAddress: "",
		StreamAddress:  "127.0.0.1:0",
		SocketGroup:    "",
		EnableCDI:      true,
		CDISpecDirs:    []string{"/etc/cdi", "/var/run/cdi"},
		CNI: CNI{
			ConfDir:           "/etc/cni/net.d",
			BinDirs:           []string{"/opt/cni/bin"},
			DefaultMasquerade: true,
		},
		Tracing: Tracing{Endpoint: "127.0.0.1:4317"},
		NRI: NRI{
			SocketPath:                "/var/run/nri/nri.sock",
			PluginPath:                "/opt/nri/plugins",
			PluginConfigPath:          "/etc/nri/conf.d",
			PluginRegistrationTimeout: "5s",
			PluginRequestTimeout:      "2s",
		},
		ImagePullStallTimeout:  "1m",
		MaxConcurrentDownloads: 3,
		Registries:             map[string]Registry{},
		DefaultRuntime:         "runc",
		// The names RunPodSandbox accepted before handlers were
		// configurable: berth's one runtime as a RuntimeClass names it.
		Runtimes: map[string]Runtime{"runc": {DefaultAnnotations: []string{}}, "berth": {DefaultAnnotations: []string{}}},
	}
}
