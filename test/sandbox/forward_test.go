package sandbox_test

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// TestPodsBehindDockersForwardDrop: on a host where dockerd runs with its
// defaults (FORWARD policy DROP, bridge netfilter on), traffic between two
// pods on one bridge passes FORWARD and is dropped unless a rule accepts
// it. The firewall plugin in both the test bed's network and berth's
// default network is that rule: pod-to-pod HTTP and a pod reaching
// another's hostPort work, and stop working once its rules are gone,
// which shows the DROP really applies.
func TestPodsBehindDockersForwardDrop(t *testing.T) {
	framework.RequireRoot(t)
	t.Run("test network", func(t *testing.T) {
		e := newEnv(t)
		forwardDropChecks(t, e, e.net.Subnet)
	})
	t.Run("default network", func(t *testing.T) {
		subnet := cnitest.FreeSubnet(t)
		bridge := "bf" + framework.RandHex(4)
		t.Cleanup(func() {
			cnitest.DeleteFirewallRules(subnet)
			cnitest.DeleteLink(bridge)
		})
		parent := "/berth-e2e-" + framework.RandHex(4)
		t.Cleanup(func() { framework.RemoveCgroup(parent) })
		d := framework.StartDaemon(t, framework.WithArgs("--cni-conf-dir", filepath.Join(t.TempDir(), "net.d"), "--cni-bin-dir", cnitest.PluginDir(t),
			"--default-network", "--default-network-bridge", bridge, "--default-network-subnet", subnet.String()))
		e := &env{t: t, d: d, parent: parent}
		t.Cleanup(e.cleanup)
		forwardDropChecks(t, e, subnet)
	})
}

func forwardDropChecks(t *testing.T, e *env, subnet *net.IPNet) {
	hostPort, err := strconv.Atoi(strings.TrimPrefix(framework.FreeTCPAddr(t), "127.0.0.1:"))
	if err != nil {
		t.Fatal(err)
	}
	cnitest.DockerForwarding(t)

	cfgB := e.config("b")
	cfgB.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: int32(hostPort)}}
	idA, idB := e.run(e.config("a")), e.run(cfgB)
	stB, infoB := e.status(idB)
	_, infoA := e.status(idA)
	ipB := inSubnet(t, subnet, stB.Network.Ip)
	serveHTTPIn(t, infoB.NetNS, "b")

	// The host's address on the bridge is an address of the host like any
	// other: portmap's DNAT sends the connection on to b, across the
	// bridge and through FORWARD.
	urls := map[string]string{
		"pod to pod":       "http://" + net.JoinHostPort(ipB.String(), "80") + "/",
		"pod to host port": "http://" + net.JoinHostPort(firstAddr(subnet).String(), strconv.Itoa(hostPort)) + "/",
	}
	for what, url := range urls {
		if got, err := httpGetFrom(infoA.NetNS, url, 5*time.Second); err != nil || got != "hello from b" {
			t.Errorf("%s (%s) behind FORWARD DROP: %q, %v", what, url, got, err)
		}
	}
	if rules := cnitest.FirewallRules(subnet); len(rules) != 4 {
		t.Errorf("firewall rules for two pods: %v, want 4", rules)
	}

	// Without the firewall plugin's rules the same request is dropped.
	cnitest.DeleteFirewallRules(subnet)
	if got, err := httpGetFrom(infoA.NetNS, urls["pod to pod"], 2*time.Second); err == nil {
		t.Errorf("pod to pod with no firewall rules answered %q: FORWARD DROP did not apply", got)
	}

	// DEL removes whatever rules a pod still has: run a third pod, then
	// remove them all.
	idC := e.run(e.config("c"))
	stC, _ := e.status(idC)
	if rules := cnitest.FirewallRules(subnet); len(rules) != 2 || !strings.Contains(strings.Join(rules, " "), stC.Network.Ip+"/32") {
		t.Errorf("firewall rules for pod c (%s): %v", stC.Network.Ip, rules)
	}
	for _, id := range []string{idA, idB, idC} {
		e.remove(id)
	}
	if rules := cnitest.FirewallRules(subnet); len(rules) != 0 {
		t.Errorf("firewall rules left after the pods went: %v", rules)
	}
	if rules := natRulesNaming(idB); len(rules) != 0 {
		t.Errorf("nat rules left for pod b: %v", rules)
	}
}
