// Package cnitest gives tests a private CNI network: the project's plugin
// binaries, a conf dir with a bridge network of its own (bridge name,
// subnet, host-local lease dir, the firewall plugin's FORWARD rules), and
// a plugin that always fails. Each
// network is removed again when the test ends, so tests of several
// packages can run side by side on one host.
package cnitest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/mattn/go-shellwords"
)

// Plugins is the set a bridge network needs.
var Plugins = []string{"bridge", "host-local", "loopback", "portmap", "ptp", "firewall"}

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// PluginDir returns a directory holding the CNI plugins: $BERTH_CNI_BIN_DIR
// (hack/install-tools), else the same under the default cache, else built
// once per test binary with the go toolchain from the versions go.mod pins.
func PluginDir(t testing.TB) string {
	t.Helper()
	candidates := []string{os.Getenv("BERTH_CNI_BIN_DIR")}
	if m, _ := filepath.Glob("/var/cache/berth-dev/cni-plugins-*"); len(m) > 0 {
		candidates = append(candidates, m...)
	}
	for _, dir := range candidates {
		if dir != "" && hasAll(dir) {
			return dir
		}
	}
	buildOnce.Do(func() { builtDir, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("build CNI plugins: %v", buildErr)
	}
	return builtDir
}

func hasAll(dir string) bool {
	for _, p := range Plugins {
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func build() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir := filepath.Join(os.TempDir(), "berth-cni-plugins")
	if hasAll(dir) {
		return dir, nil
	}
	pkgs := map[string]string{
		"bridge": "main/bridge", "host-local": "ipam/host-local", "loopback": "main/loopback",
		"portmap": "meta/portmap", "ptp": "main/ptp", "firewall": "meta/firewall",
	}
	args := []string{"build", "-o", dir + "/"}
	for _, p := range Plugins {
		args = append(args, "github.com/containernetworking/plugins/plugins/"+pkgs[p])
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	return dir, nil
}

// Net is a private bridge network for one test.
type Net struct {
	Name    string
	ConfDir string
	BinDir  string
	DataDir string // host-local leases: DataDir/<Name>/<ip>
	Bridge  string
	Subnet  *net.IPNet
}

// NewNet writes a bridge + host-local + portmap + loopback conflist into a
// fresh conf dir and removes the bridge at the end of the test.
func NewNet(t testing.TB) *Net {
	t.Helper()
	dir := t.TempDir()
	n := &Net{
		Name:    "bt" + randHex(4),
		ConfDir: filepath.Join(dir, "net.d"),
		BinDir:  PluginDir(t),
		DataDir: filepath.Join(dir, "ipam"),
		Subnet:  FreeSubnet(t),
	}
	n.Bridge = n.Name // 10 chars, under IFNAMSIZ
	if err := os.MkdirAll(n.ConfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.WriteConf(t, "10-"+n.Name+".conflist", n.Conflist("bridge"))
	t.Cleanup(func() {
		DeleteIPTablesRules(n.Name)
		DeleteFirewallRules(n.Subnet)
		DeleteLink(n.Bridge)
	})
	return n
}

// WriteConf writes v as JSON into the conf dir.
func (n *Net) WriteConf(t testing.TB, file string, v any) string {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(n.ConfDir, file)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Leases lists the IPs host-local holds in this network.
func (n *Net) Leases(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(n.DataDir, n.Name))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// FailingPluginMessage is what the failing plugin reports.
const FailingPluginMessage = "berth test plugin refuses every pod"

// AddFailingPlugin installs a plugin named name into a fresh bin dir
// (returned, followed by the real plugins' dir) that fails ADD with
// FailingPluginMessage, and with failDel also DEL.
func AddFailingPlugin(t testing.TB, name string, failDel bool) []string {
	t.Helper()
	dir := t.TempDir()
	script := fmt.Sprintf(`#!/bin/sh
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}'; exit 0;;
ADD) ;;
DEL) [ %q = true ] || exit 0;;
*) exit 0;;
esac
echo '{"cniVersion":"1.0.0","code":999,"msg":%q}'
exit 1
`, fmt.Sprint(failDel), FailingPluginMessage)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{dir, PluginDir(t)}
}

// FreeSubnet picks a /24 in 10.224.0.0/11 that no interface of the host
// is on, at a random place so parallel test processes rarely collide.
func FreeSubnet(t testing.TB) *net.IPNet {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	used := func(n *net.IPNet) bool {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (n.Contains(ipn.IP) || ipn.Contains(n.IP)) {
				return true
			}
		}
		return false
	}
	var b [2]byte
	rand.Read(b[:])
	start := int(b[0])<<8 | int(b[1])
	for i := range 1 << 13 {
		k := (start + i) % (1 << 13)
		n := &net.IPNet{IP: net.IPv4(10, byte(224+k>>8), byte(k), 0).To4(), Mask: net.CIDRMask(24, 32)}
		if !used(n) {
			return n
		}
	}
	t.Fatal("no free /24 in 10.224.0.0/11")
	return nil
}

// DeleteLink removes a network interface of the host, if present.
func DeleteLink(name string) {
	if _, err := net.InterfaceByName(name); err != nil {
		return
	}
	exec.Command("ip", "link", "del", name).Run()
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToLower(hex.EncodeToString(b))
}

// DeleteIPTablesRules removes the nat rules the bridge plugin's ipMasq
// made for network name, and their per-pod chains. Plugins remove them on
// DEL; this is the safety net for a test that failed half-way.
func DeleteIPTablesRules(name string) {
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		return
	}
	marker := fmt.Sprintf("name: \\\"%s\\\"", name)
	chains := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "-A ") || !strings.Contains(line, marker) {
			continue
		}
		args, err := shellwords.Parse(line)
		if err != nil || len(args) < 2 {
			continue
		}
		for i, a := range args {
			if a == "-j" && i+1 < len(args) && strings.HasPrefix(args[i+1], "CNI-") && !strings.HasPrefix(args[i+1], "CNI-HOSTPORT") {
				chains[args[i+1]] = true
			}
		}
		args[0] = "-D"
		exec.Command("iptables", append([]string{"-t", "nat"}, args...)...).Run()
	}
	for c := range chains {
		exec.Command("iptables", "-t", "nat", "-F", c).Run()
		exec.Command("iptables", "-t", "nat", "-X", c).Run()
	}
}

// Conflist is the network's configuration (bridge with masquerading,
// host-local, portmap, loopback, firewall) with bridgePlugin as its first
// plugin: "bridge", or a test's wrapper around it. The firewall plugin
// makes it work on a host whose FORWARD policy is DROP (Docker's).
func (n *Net) Conflist(bridgePlugin string) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.Name,
		"plugins": []any{
			map[string]any{
				"type": bridgePlugin, "bridge": n.Bridge, "isGateway": true, "ipMasq": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.Subnet.String()}}},
					"dataDir": n.DataDir,
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
			map[string]any{"type": "loopback"},
			map[string]any{"type": "firewall"},
		},
	}
}

// FirewallRules lists the rules of the firewall plugin's CNI-FORWARD chain
// (filter table) that name an address of subnet: what its ADD made for
// pods of that subnet and its DEL removes again.
func FirewallRules(subnet *net.IPNet) []string {
	out, err := exec.Command("iptables-save", "-t", "filter").Output()
	if err != nil {
		return nil
	}
	var rules []string
	for line := range strings.Lines(string(out)) {
		args, err := shellwords.Parse(strings.TrimSpace(line))
		if err != nil || len(args) < 2 || args[0] != "-A" || args[1] != "CNI-FORWARD" {
			continue
		}
		for i, a := range args {
			if (a == "-s" || a == "-d") && i+1 < len(args) {
				if ip, _, err := net.ParseCIDR(args[i+1]); err == nil && subnet.Contains(ip) {
					rules = append(rules, strings.TrimSpace(line))
					break
				}
			}
		}
	}
	return rules
}

// DeleteFirewallRules removes what FirewallRules lists: the safety net
// for a test that failed before its pods' DEL.
func DeleteFirewallRules(subnet *net.IPNet) {
	for _, r := range FirewallRules(subnet) {
		args, err := shellwords.Parse(r)
		if err != nil {
			continue
		}
		args[0] = "-D"
		exec.Command("iptables", append([]string{"-t", "filter"}, args...)...).Run()
	}
}
