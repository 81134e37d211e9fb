package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// DefaultIfName is the pod's interface, as every CNI runtime names it.
const DefaultIfName = "eth0"

// Config says where CNI configurations and plugins are.
type Config struct {
	ConfDir string
	BinDirs []string
	// CacheDir holds libcni's record of every attachment (the result and
	// the exact config used), which DEL and GC rely on. One per daemon.
	CacheDir string
	IfName   string
	// Default, when set, is written to ConfDir at start if it holds no
	// configuration, or, if it follows the pod CIDR, once the kubelet
	// sends one (SetPodCIDRs).
	Default *DefaultNetwork
}

// CNI runs CNI plugins for pods. It is safe for concurrent use.
type CNI struct {
	cfg Config
	lib *libcni.CNIConfig
	log *slog.Logger
	// writeMu orders rewrites of the default network by SetPodCIDRs.
	writeMu sync.Mutex
	mu      sync.Mutex
	fp      string
	list    *libcni.NetworkConfigList
	err     error // why list is nil
	// podCIDRs comes from UpdateRuntimeConfig and is handed to IPAM.
	podCIDRs []string
}

// NewCNI prepares CNI. It writes the default network first when asked to.
func NewCNI(cfg Config, log *slog.Logger) (*CNI, error) {
	if cfg.IfName == "" {
		cfg.IfName = DefaultIfName
	}
	if cfg.CacheDir == "" {
		return nil, errors.New("CNI cache dir is required")
	}
	if log == nil {
		log = slog.Default()
	}
	switch d := cfg.Default; {
	case d == nil:
	case d.FollowPodCIDR:
		if d.Subnet != "" {
			return nil, fmt.Errorf("default network: a subnet (%s) and following the pod CIDR exclude each other", d.Subnet)
		}
		log.Info("default CNI network follows the pod CIDR: written when the kubelet sends it", "dir", cfg.ConfDir, "bridge", d.Bridge)
	default:
		path, written, err := WriteDefault(cfg.ConfDir, *d)
		if err != nil {
			return nil, err
		}
		if written {
			log.Info("wrote default CNI network", "path", path, "subnet", d.Subnet, "bridge", d.Bridge)
		}
	}
	return &CNI{
		cfg: cfg,
		// The exec given, not left to libcni: it makes a missing one on
		// first use of each call, a data race between pods set up or torn
		// down side by side (recovery undoes them in parallel).
		lib: libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cfg.CacheDir, &invoke.DefaultExec{
			RawExec:       &invoke.RawExec{Stderr: os.Stderr},
			PluginDecoder: version.PluginDecoder{},
		}),
		log: log,
	}, nil
}

// network returns the current network config, reloading it when the conf
// dir changed. This re-stat on demand is what makes NetworkReady flip
// without a restart; it costs a readdir and a stat per file.
func (c *CNI) network() (*libcni.NetworkConfigList, error) {
	files, err := confFiles(c.cfg.ConfDir)
	if err != nil {
		return nil, err
	}
	fp := fingerprint(files)
	c.mu.Lock()
	defer c.mu.Unlock()
	if fp == c.fp && (c.list != nil || c.err != nil) {
		return c.list, c.err
	}
	c.fp = fp
	switch {
	case len(files) == 0 && c.cfg.Default != nil && c.cfg.Default.FollowPodCIDR:
		c.list, c.err = nil, fmt.Errorf("%w in %s: %w", ErrNoConfig, c.cfg.ConfDir, ErrNoPodCIDR)
	case len(files) == 0:
		c.list, c.err = nil, fmt.Errorf("%w in %s", ErrNoConfig, c.cfg.ConfDir)
	default:
		c.list, c.err = loadConfFile(files[0])
		if c.err == nil {
			c.log.Info("loaded CNI network", "name", c.list.Name, "file", files[0], "cniVersion", c.list.CNIVersion)
		}
	}
	return c.list, c.err
}

// Ready reports why pods cannot be networked now, or nil: a config must
// load and every plugin it names must be installed.
func (c *CNI) Ready(ctx context.Context) error {
	list, err := c.network()
	if err != nil {
		return err
	}
	for _, p := range list.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, c.cfg.BinDirs); err != nil {
			return fmt.Errorf("network %s: plugin %s: %w", list.Name, p.Network.Type, err)
		}
	}
	return nil
}

// ErrInvalidPodCIDR marks a pod CIDR that does not parse, the caller's
// fault; other SetPodCIDRs errors are the node's (a conf dir not writable).
var ErrInvalidPodCIDR = errors.New("invalid pod CIDR")

// ErrStillAttached marks a failed Setup whose undoing DEL failed too: the
// pod may hold an IP lease and interfaces until a Teardown succeeds.
var ErrStillAttached = errors.New("pod still attached")

// undoDelTimeout bounds the DEL that undoes a failed ADD: it runs on when
// the caller gives up (a plugin killed half-way leaves what no later DEL
// finds), but not forever.
const undoDelTimeout = 2 * time.Minute

// SetPodCIDRs records the node's pod CIDRs, passed to IPAM as ipRanges,
// and writes the default network on them when it follows the pod CIDR.
// A failed write is returned, and the kubelet sends the CIDR again.
func (c *CNI) SetPodCIDRs(cidrs []string) error {
	for _, s := range cidrs {
		if _, _, err := net.ParseCIDR(s); err != nil {
			return fmt.Errorf("%w %q: %w", ErrInvalidPodCIDR, s, err)
		}
	}
	if d := c.cfg.Default; d != nil && d.FollowPodCIDR && len(cidrs) > 0 {
		c.writeMu.Lock()
		path, written, err := WriteDefaultForPodCIDRs(c.cfg.ConfDir, *d, cidrs)
		c.writeMu.Unlock()
		switch {
		case err != nil:
			return fmt.Errorf("default network on pod CIDR %s: %w", strings.Join(cidrs, ","), err)
		case written:
			c.log.Info("wrote default CNI network on the pod CIDR", "path", path, "pod_cidr", strings.Join(cidrs, ","), "bridge", d.Bridge)
		case filepath.Base(path) != DefaultNetworkFile:
			c.log.Info("pod CIDR not written: another CNI config is in use", "config", path, "pod_cidr", strings.Join(cidrs, ","))
		}
	}
	c.mu.Lock()
	c.podCIDRs = append([]string(nil), cidrs...)
	c.mu.Unlock()
	return nil
}

// PodCIDRs returns what SetPodCIDRs recorded.
func (c *CNI) PodCIDRs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.podCIDRs...)
}

// Result is what a pod got from its network.
type Result struct {
	Network string
	// IPs are the pod's addresses, IPv4 first: the first is the pod IP,
	// the others its additional IPs.
	IPs []net.IP
}

// Setup attaches the pod to the network (CNI ADD). On failure it runs DEL
// so no IP lease or half-made interface stays behind, and returns the
// plugin's error.
func (c *CNI) Setup(ctx context.Context, pod *Pod) (*Result, error) {
	list, err := c.network()
	if err != nil {
		return nil, fmt.Errorf("pod %s: network not ready: %w", pod.ID, err)
	}
	rt := c.runtimeConf(pod, pod.NetNS)
	res, err := c.lib.AddNetworkList(ctx, list, rt)
	if err != nil {
		// A plugin earlier in the chain may already hold an IP, and a
		// later one rules for it: libcni cached no result to undo them by.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoDelTimeout)
		defer cancel()
		if derr := c.lib.DelNetworkList(dctx, c.withLostResult(list, pod.NetNS), rt); derr != nil {
			c.log.Warn("CNI DEL after failed ADD", "pod", pod.ID, "error", derr)
			return nil, fmt.Errorf("pod %s: CNI ADD on network %s: %w; the DEL undoing it failed too, %w: %w", pod.ID, list.Name, err, ErrStillAttached, derr)
		}
		return nil, fmt.Errorf("pod %s: CNI ADD on network %s: %w", pod.ID, list.Name, err)
	}
	ips, err := resultIPs(res, c.cfg.IfName)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoDelTimeout)
		defer cancel()
		if derr := c.lib.DelNetworkList(dctx, list, rt); derr != nil {
			c.log.Warn("CNI DEL after unusable ADD result", "pod", pod.ID, "error", derr)
			return nil, fmt.Errorf("pod %s: network %s: %w; the DEL undoing the ADD failed, %w: %w", pod.ID, list.Name, err, ErrStillAttached, derr)
		}
		return nil, fmt.Errorf("pod %s: network %s: %w", pod.ID, list.Name, err)
	}
	return &Result{Network: list.Name, IPs: ips}, nil
}

// Teardown detaches the pod (CNI DEL). It uses the config the pod was
// attached with (from libcni's cache) so that a config changed or removed
// since still releases the lease, and passes no netns when the pin is
// gone, which plugins treat as "interfaces already gone, release IPAM".
// Detaching a pod that was never attached succeeds.
func (c *CNI) Teardown(ctx context.Context, pod *Pod) error {
	netns := pod.NetNS
	if netns != "" && !IsPinned(netns) {
		netns = ""
	}
	atts, err := c.lib.GetCachedAttachments(pod.ID)
	if err != nil {
		return fmt.Errorf("pod %s: read CNI cache: %w", pod.ID, err)
	}
	var errs []error
	for _, a := range atts {
		if err := c.delAttachment(ctx, a, netns); err != nil {
			errs = append(errs, err)
		}
	}
	if len(atts) > 0 {
		return errors.Join(errs...)
	}
	// No cache entry: the ADD never finished, or the cache was lost. DEL
	// against the current config is still right: plugins ignore unknown
	// containers, and a lease taken by an interrupted ADD is freed.
	list, err := c.network()
	if err != nil {
		return nil
	}
	if err := c.lib.DelNetworkList(ctx, c.withLostResult(list, netns), c.runtimeConf(pod, netns)); err != nil {
		return fmt.Errorf("pod %s: CNI DEL on network %s: %w", pod.ID, list.Name, err)
	}
	return nil
}

func (c *CNI) delAttachment(ctx context.Context, a *libcni.NetworkAttachment, netns string) error {
	list, err := libcni.NetworkConfFromBytes(a.Config)
	if err != nil {
		return fmt.Errorf("pod %s: cached CNI config of network %s: %w", a.ContainerID, a.Network, err)
	}
	rt := &libcni.RuntimeConf{
		ContainerID:    a.ContainerID,
		NetNS:          netns,
		IfName:         a.IfName,
		Args:           a.CniArgs,
		CapabilityArgs: a.CapabilityArgs,
	}
	if err := c.lib.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("pod %s: CNI DEL on network %s: %w", a.ContainerID, a.Network, err)
	}
	return nil
}

// Check asks the plugins whether the pod's attachment is still intact
// (CNI CHECK). Networks whose plugins cannot check report nil.
func (c *CNI) Check(ctx context.Context, pod *Pod) error {
	atts, err := c.lib.GetCachedAttachments(pod.ID)
	if err != nil {
		return fmt.Errorf("pod %s: read CNI cache: %w", pod.ID, err)
	}
	if len(atts) == 0 {
		return fmt.Errorf("pod %s: not attached to any network", pod.ID)
	}
	for _, a := range atts {
		list, err := libcni.NetworkConfFromBytes(a.Config)
		if err != nil {
			return fmt.Errorf("pod %s: cached CNI config: %w", pod.ID, err)
		}
		if ok, _ := version.GreaterThanOrEqualTo(list.CNIVersion, "0.4.0"); !ok {
			continue
		}
		rt := &libcni.RuntimeConf{ContainerID: a.ContainerID, NetNS: pod.NetNS, IfName: a.IfName, Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs}
		if err := c.lib.CheckNetworkList(ctx, list, rt); err != nil {
			return fmt.Errorf("pod %s: CNI CHECK on network %s: %w", pod.ID, list.Name, err)
		}
	}
	return nil
}

// GC detaches every cached attachment whose pod is not in keep (CNI DEL
// with the cached config), then lets plugins of the current network that
// support it (CNI 1.1 GC) drop whatever else they hold for other pods,
// such as leases of an ADD that a crash interrupted before it was cached.
// It returns the pod ids it detached.
func (c *CNI) GC(ctx context.Context, keep map[string]bool) ([]string, error) {
	atts, err := c.lib.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("read CNI cache: %w", err)
	}
	var errs []error
	var gone []string
	for _, a := range atts {
		if keep[a.ContainerID] {
			continue
		}
		netns := a.NetNS
		if netns != "" && !IsPinned(netns) {
			netns = ""
		}
		if err := c.delAttachment(ctx, a, netns); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, a.ContainerID)
	}
	list, err := c.network()
	if err != nil {
		return gone, errors.Join(errs...)
	}
	valid := make([]types.GCAttachment, 0, len(keep))
	for id := range keep {
		valid = append(valid, types.GCAttachment{ContainerID: id, IfName: c.cfg.IfName})
	}
	if err := c.lib.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		errs = append(errs, fmt.Errorf("CNI GC on network %s: %w", list.Name, err))
	}
	return gone, errors.Join(errs...)
}

// resultIPs picks the pod's addresses from an ADD result: those on the
// pod-side interface, or all of them when the plugin does not say which
// interface an address is on. IPv4 comes first, as the kubelet expects the
// primary pod IP to be.
func resultIPs(r types.Result, ifName string) ([]net.IP, error) {
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return nil, fmt.Errorf("convert CNI result: %w", err)
	}
	var v4, v6 []net.IP
	for _, ip := range res.IPs {
		if ip.Interface != nil {
			i := *ip.Interface
			if i < 0 || i >= len(res.Interfaces) {
				continue
			}
			iface := res.Interfaces[i]
			if iface.Sandbox == "" || (iface.Name != ifName && iface.Name != "") {
				continue
			}
		}
		if ip.Address.IP.To4() != nil {
			v4 = append(v4, ip.Address.IP.To4())
		} else {
			v6 = append(v6, ip.Address.IP)
		}
	}
	ips := append(v4, v6...)
	if len(ips) == 0 {
		return nil, errors.New("CNI result has no IP address for the pod")
	}
	return ips, nil
}

// EnsureCacheDir creates the libcni cache dir; libcni only creates it on
// the first successful ADD.
func (c *CNI) EnsureCacheDir() error {
	return os.MkdirAll(c.cfg.CacheDir, 0o700)
}
