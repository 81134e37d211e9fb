package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network"
	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// serveHTTPIn serves HTTP from inside a pod's network namespace; every
// answer names the pod.
func serveHTTPIn(t *testing.T, netns, name string) {
	t.Helper()
	l := listenOnly(t, netns, ":80")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", name)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// listenOnly opens a TCP listener in netns without serving it.
func listenOnly(t *testing.T, netns, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	if err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, netns, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// httpGetFrom GETs url from inside netns: the connection's socket is made
// in the namespace, so it leaves through the pod's eth0.
func httpGetFrom(netns, url string, timeout time.Duration) (string, error) {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, nw, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, nw, addr)
			return err
		})
		return c, err
	}}
	client := &http.Client{Transport: tr, Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}

func networkCondition(t *testing.T, d *framework.Daemon) *runtimeapi.RuntimeCondition {
	t.Helper()
	resp, err := d.Runtime.Status(framework.Ctx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Status.Conditions {
		if c.Type == runtimeapi.NetworkReady {
			return c
		}
	}
	t.Fatalf("no NetworkReady condition in %v", resp.Status)
	return nil
}

func updatePodCIDR(t *testing.T, d *framework.Daemon, cidr string) {
	t.Helper()
	if _, err := d.Runtime.UpdateRuntimeConfig(framework.Ctx(t), &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}},
	}); err != nil {
		t.Fatalf("UpdateRuntimeConfig %s: %v", cidr, err)
	}
}

// firstAddr is the first address of a subnet, the gateway host-local
// hands out and the bridge holds.
func firstAddr(subnet *net.IPNet) net.IP {
	ip := append(net.IP(nil), subnet.IP.To4()...)
	ip[3]++
	return ip
}

func bridgeHas(t *testing.T, bridge string, ip net.IP) bool {
	t.Helper()
	iface, err := net.InterfaceByName(bridge)
	if err != nil {
		t.Fatalf("bridge %s: %v", bridge, err)
	}
	addrs, _ := iface.Addrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// natRulesNaming lists the nat table's rules that mention s (a pod id).
func natRulesNaming(s string) []string {
	out, _ := exec.Command("iptables-save", "-t", "nat").Output()
	var rules []string
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "-A ") && strings.Contains(line, s) {
			rules = append(rules, strings.TrimSpace(line))
		}
	}
	return rules
}

// TestDefaultNetworkFollowsPodCIDR is a kind node's network: the default
// network waits for the pod CIDR from UpdateRuntimeConfig, takes it as its
// subnet with the gateway on the bridge, and leaves masquerading to
// someone else (flannel).
func TestDefaultNetworkFollowsPodCIDR(t *testing.T) {
	framework.RequireRoot(t)
	cidr := cnitest.FreeSubnet(t)
	bridge := "bp" + framework.RandHex(4)
	var cidr2 *net.IPNet
	t.Cleanup(func() {
		cnitest.DeleteFirewallRules(cidr)
		if cidr2 != nil {
			cnitest.DeleteFirewallRules(cidr2)
		}
		cnitest.DeleteLink(bridge)
	})
	parent := "/berth-e2e-" + framework.RandHex(4)
	t.Cleanup(func() { framework.RemoveCgroup(parent) })
	confDir := filepath.Join(t.TempDir(), "net.d")
	// The keys as a kind node's config.toml has them.
	d := framework.StartDaemon(t, framework.WithConfig(fmt.Sprintf(`
[cni]
default_network = true
default_pod_cidr = true
default_masquerade = false
default_bridge = %q
`, bridge)), framework.WithArgs("--cni-conf-dir", confDir, "--cni-bin-dir", cnitest.PluginDir(t)))
	e := &env{t: t, d: d, parent: parent}
	t.Cleanup(e.cleanup)

	c := networkCondition(t, d)
	if c.Status || c.Reason != network.ReasonNotReady || !strings.Contains(c.Message, "pod CIDR") {
		t.Errorf("NetworkReady before the pod CIDR = %v %q %q, want false naming the pod CIDR", c.Status, c.Reason, c.Message)
	}
	if entries, _ := os.ReadDir(confDir); len(entries) != 0 {
		t.Errorf("conf dir holds %v before the pod CIDR", entries)
	}

	updatePodCIDR(t, d, cidr.String())
	if c := networkCondition(t, d); !c.Status {
		t.Fatalf("NetworkReady after the pod CIDR = false: %s", c.Message)
	}
	idA, idB := e.run(e.config("a")), e.run(e.config("b"))
	stA, infoA := e.status(idA)
	stB, infoB := e.status(idB)
	ipA, ipB := inSubnet(t, cidr, stA.Network.Ip), inSubnet(t, cidr, stB.Network.Ip)
	if gw := firstAddr(cidr); !bridgeHas(t, bridge, gw) {
		t.Errorf("bridge %s does not hold the gateway %s", bridge, gw)
	}
	serveHTTPIn(t, infoB.NetNS, "b")
	serveHTTPIn(t, infoA.NetNS, "a")
	for _, hop := range []struct {
		from, to string
		netns    string
		ip       net.IP
	}{{"a", "b", infoA.NetNS, ipB}, {"b", "a", infoB.NetNS, ipA}} {
		got, err := httpGetFrom(hop.netns, "http://"+net.JoinHostPort(hop.ip.String(), "80")+"/", 5*time.Second)
		if err != nil || got != "hello from "+hop.to {
			t.Errorf("%s -> %s: %q, %v", hop.from, hop.to, got, err)
		}
	}
	if rules := natRulesNaming(idA); len(rules) != 0 {
		t.Errorf("default_masquerade = false, yet nat rules for pod a: %v", rules)
	}

	// The same CIDR again (the kubelet resends it) changes nothing; a new
	// one rewrites the network, and new pods get addresses from it.
	conf := filepath.Join(confDir, network.DefaultNetworkFile)
	before, _ := os.Stat(conf)
	updatePodCIDR(t, d, cidr.String())
	if after, _ := os.Stat(conf); !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Error("the same pod CIDR rewrote the default network")
	}
	cidr2 = cnitest.FreeSubnet(t)
	updatePodCIDR(t, d, cidr2.String())
	idC := e.run(e.config("c"))
	stC, _ := e.status(idC)
	inSubnet(t, cidr2, stC.Network.Ip)

	for _, id := range []string{idA, idB, idC} {
		e.remove(id)
	}
	for _, subnet := range []*net.IPNet{cidr, cidr2} {
		if rules := cnitest.FirewallRules(subnet); len(rules) != 0 {
			t.Errorf("firewall rules left after the pods went: %v", rules)
		}
	}
}
