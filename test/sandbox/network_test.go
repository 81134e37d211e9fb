package sandbox_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// listenIn opens a TCP listener inside a pod's network namespace: the
// socket keeps the namespace it was made in, so the test can serve from
// it after leaving.
func listenIn(t *testing.T, netns, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, netns, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "pong from %s: %s", c.LocalAddr(), line)
			}()
		}
	}()
	return l
}

// dialFrom connects from inside a pod's netns and returns the answer.
func dialFrom(t *testing.T, netns, addr string) string {
	t.Helper()
	var c net.Conn
	err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, netns, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "ping\n")
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return string(b)
}

func TestTwoPodsOwnTheirNetwork(t *testing.T) {
	e := newEnv(t)
	idA, idB := e.run(e.config("a")), e.run(e.config("b"))
	stA, infoA := e.status(idA)
	stB, infoB := e.status(idB)
	ipA := inSubnet(t, e.net.Subnet, stA.Network.Ip)
	ipB := inSubnet(t, e.net.Subnet, stB.Network.Ip)
	if ipA.Equal(ipB) {
		t.Fatalf("both pods got %s", ipA)
	}
	if infoA.NetNS == "" || infoA.NetNS == infoB.NetNS {
		t.Fatalf("netns paths %q and %q", infoA.NetNS, infoB.NetNS)
	}
	if nsInode(fmt.Sprintf("/proc/%d/ns/net", infoA.Pid)) != nsInode(infoA.NetNS) {
		t.Error("pod a's pause is not in its pinned netns")
	}
	// Both pods listen on port 80 at once: each has its own port space.
	listenIn(t, infoA.NetNS, ":80")
	listenIn(t, infoB.NetNS, ":80")
	// A reaches B over the bridge, by B's pod IP.
	got := dialFrom(t, infoA.NetNS, net.JoinHostPort(ipB.String(), "80"))
	if want := "pong from " + net.JoinHostPort(ipB.String(), "80") + ": ping\n"; got != want {
		t.Errorf("a -> b answered %q, want %q", got, want)
	}
	got = dialFrom(t, infoB.NetNS, net.JoinHostPort(ipA.String(), "80"))
	if !strings.HasPrefix(got, "pong from "+ipA.String()) {
		t.Errorf("b -> a answered %q", got)
	}
	if leases := e.net.Leases(t); len(leases) != 2 {
		t.Errorf("leases = %v, want 2", leases)
	}
}

func TestHostNetworkPodSkipsCNI(t *testing.T) {
	// The only network config names a plugin that fails every ADD and
	// DEL: a host network pod must never run it.
	e := newEnv(t, func(o *envOptions) {
		o.prepare = func(n *cnitest.Net) (string, []string) {
			dir := t.TempDir()
			n.ConfDir = dir
			n.WriteConf(t, "10-fail.conf", map[string]any{"cniVersion": "1.0.0", "name": n.Name, "type": "failer"})
			return dir, cnitest.AddFailingPlugin(t, "failer", true)
		}
	})
	cfg := e.config("host")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE,
	}}
	id := e.run(cfg)
	st, info := e.status(id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Network.GetIp() != "" || info.NetNS != "" {
		t.Fatalf("host network pod: state %v, ip %q, netns %q", st.State, st.Network.GetIp(), info.NetNS)
	}
	if got := st.GetLinux().GetNamespaces().GetOptions().GetNetwork(); got != runtimeapi.NamespaceMode_NODE {
		t.Errorf("status namespace options network = %v", got)
	}
	// pause sees the host's interfaces.
	var podIfaces []string
	if err := ns.WithNetNSPath(fmt.Sprintf("/proc/%d/ns/net", info.Pid), func(ns.NetNS) error {
		all, err := net.Interfaces()
		for _, i := range all {
			podIfaces = append(podIfaces, i.Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	host, _ := net.Interfaces()
	for _, h := range host {
		if !slices.Contains(podIfaces, h.Name) {
			t.Errorf("host interface %s not seen by the host network pod (%v)", h.Name, podIfaces)
		}
	}
	e.stop(id)
	e.remove(id)
	if left := e.leftovers(id, info.CgroupPath); len(left) > 0 {
		t.Errorf("left after remove: %v", left)
	}
}

func TestStopReleasesRemoveLeavesNothing(t *testing.T) {
	e := newEnv(t)
	id := e.run(e.config("a"))
	st, info := e.status(id)
	ip := st.Network.Ip
	lease := e.net.DataDir + "/" + e.net.Name + "/" + ip
	if _, err := os.Stat(lease); err != nil {
		t.Fatalf("lease file of %s: %v", ip, err)
	}
	for range 2 { // idempotent
		e.stop(id)
	}
	st, _ = e.status(id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("state after stop = %v", st.State)
	}
	if _, err := os.Stat(lease); !os.IsNotExist(err) {
		t.Errorf("lease file %s still there after stop (%v)", lease, err)
	}
	if _, err := os.Stat(info.NetNS); !os.IsNotExist(err) {
		t.Errorf("netns pin %s still there after stop (%v)", info.NetNS, err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", info.Pid)); err == nil && framework.Running(info.Pid) {
		t.Errorf("pause %d still runs after stop", info.Pid)
	}
	for range 2 { // idempotent
		e.remove(id)
	}
	if left := e.leftovers(id, info.CgroupPath); len(left) > 0 {
		t.Errorf("left after remove: %v", left)
	}
	if _, err := os.Stat(info.Dir); !os.IsNotExist(err) {
		t.Errorf("pod dir %s left (%v)", info.Dir, err)
	}
}
