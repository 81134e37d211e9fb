package network

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-runtime/berth/network/cnitest"
)

func newTestCNI(t *testing.T, confDir string, binDirs []string) *CNI {
	t.Helper()
	c, err := NewCNI(Config{ConfDir: confDir, BinDirs: binDirs, CacheDir: filepath.Join(t.TempDir(), "cache")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStatusFollowsConfDir(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "net.d")
	c := newTestCNI(t, dir, []string{cnitest.PluginDir(t)})
	steps := []struct {
		name      string
		write     map[string]string // file -> body; "" removes
		wantReady bool
		wantMsg   string
	}{
		{name: "no dir", wantMsg: "no network config found"},
		{name: "broken first file", write: map[string]string{"10-a.conflist": `{"name":`}, wantMsg: "10-a.conflist"},
		{name: "fixed in place", write: map[string]string{"10-a.conflist": bridgeConflist}, wantReady: true},
		{name: "plugin not installed", write: map[string]string{"05-b.conf": `{"cniVersion":"1.0.0","name":"x","type":"nosuchplugin"}`}, wantMsg: "nosuchplugin"},
		{name: "removed again", write: map[string]string{"05-b.conf": ""}, wantReady: true},
	}
	for _, s := range steps {
		os.MkdirAll(dir, 0o755)
		for f, body := range s.write {
			p := filepath.Join(dir, f)
			if body == "" {
				os.Remove(p)
			} else if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got := c.Status(ctx)
		if got.Ready != s.wantReady || (!got.Ready && (got.Reason != ReasonNotReady || !strings.Contains(got.Message, s.wantMsg))) {
			t.Fatalf("%s: Status = %+v, want ready %v with %q", s.name, got, s.wantReady, s.wantMsg)
		}
	}
}

func TestSetupTeardownBridge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	n := cnitest.NewNet(t)
	c := newTestCNI(t, n.ConfDir, []string{n.BinDir})
	nss, err := NewNetNS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pods := make([]*Pod, 2)
	seen := map[string]bool{}
	for i := range pods {
		id := []string{"aaaa", "bbbb"}[i]
		path, err := nss.Create(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nss.Remove(ctx, path) })
		pods[i] = &Pod{ID: id, Name: "p" + id, Namespace: "ns", UID: "uid-" + id, NetNS: path,
			PortMappings: []PortMapping{{HostPort: int32(40000 + i), ContainerPort: 80, Protocol: "TCP"}, {ContainerPort: 81}}}
		res, err := c.Setup(ctx, pods[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(res.IPs) == 0 || !n.Subnet.Contains(res.IPs[0]) || seen[res.IPs[0].String()] {
			t.Fatalf("pod %s got %v; want a fresh IP in %s", id, res.IPs, n.Subnet)
		}
		seen[res.IPs[0].String()] = true
	}
	if got := n.Leases(t); len(got) != 2 {
		t.Fatalf("leases = %v, want 2", got)
	}
	if err := c.Check(ctx, pods[0]); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	// Pod a: normal teardown, then again (idempotent).
	for range 2 {
		if err := c.Teardown(ctx, pods[0]); err != nil {
			t.Fatal(err)
		}
	}
	// Pod b: its netns is gone before teardown; the lease must still go.
	if err := nss.Remove(ctx, pods[1].NetNS); err != nil {
		t.Fatal(err)
	}
	if err := c.Teardown(ctx, pods[1]); err != nil {
		t.Fatal(err)
	}
	if got := n.Leases(t); len(got) != 0 {
		t.Fatalf("leases after teardown = %v", got)
	}
}

func TestSetupFailingPluginLeavesNoLease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	n := cnitest.NewNet(t)
	bins := cnitest.AddFailingPlugin(t, "failer", false)
	// bridge takes a lease, then the failing plugin refuses the pod.
	os.RemoveAll(n.ConfDir)
	os.MkdirAll(n.ConfDir, 0o755)
	n.WriteConf(t, "10-fail.conflist", map[string]any{
		"cniVersion": "1.0.0", "name": n.Name,
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": n.Bridge, "ipam": map[string]any{
				"type": "host-local", "dataDir": n.DataDir,
				"ranges": [][]map[string]string{{{"subnet": n.Subnet.String()}}},
			}},
			map[string]any{"type": "failer"},
		},
	})
	c := newTestCNI(t, n.ConfDir, bins)
	nss, _ := NewNetNS(t.TempDir())
	path, err := nss.Create(ctx, "cccc")
	if err != nil {
		t.Fatal(err)
	}
	defer nss.Remove(ctx, path)
	_, err = c.Setup(ctx, &Pod{ID: "cccc", Name: "p", Namespace: "ns", UID: "u", NetNS: path})
	if err == nil || !strings.Contains(err.Error(), cnitest.FailingPluginMessage) {
		t.Fatalf("Setup error = %v, want the plugin's message", err)
	}
	if got := n.Leases(t); len(got) != 0 {
		t.Fatalf("leases after failed ADD = %v", got)
	}
}

func TestGCDetachesUnknownPods(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	n := cnitest.NewNet(t)
	c := newTestCNI(t, n.ConfDir, []string{n.BinDir})
	nss, _ := NewNetNS(t.TempDir())
	for _, id := range []string{"keep", "stale"} {
		path, err := nss.Create(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nss.Remove(ctx, path) })
		if _, err := c.Setup(ctx, &Pod{ID: id, Name: id, Namespace: "ns", UID: id, NetNS: path}); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := c.GC(ctx, map[string]bool{"keep": true})
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 1 || gone[0] != "stale" {
		t.Fatalf("GC detached %v, want [stale]", gone)
	}
	if got := n.Leases(t); len(got) != 1 {
		t.Fatalf("leases after GC = %v, want 1", got)
	}
	if err := c.Teardown(ctx, &Pod{ID: "keep", NetNS: nss.Path("keep")}); err != nil {
		t.Fatal(err)
	}
}

func TestPodCIDRBecomesIPRange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	n := cnitest.NewNet(t)
	// A network meant for the pod CIDR: the ipRanges capability, and no
	// ranges of its own (host-local would add the runtime's to them).
	n.WriteConf(t, "05-cidr.conflist", map[string]any{
		"cniVersion": "1.0.0", "name": n.Name,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": n.Bridge, "isGateway": true,
			"capabilities": map[string]bool{"ipRanges": true},
			"ipam":         map[string]any{"type": "host-local", "dataDir": n.DataDir},
		}},
	})
	c := newTestCNI(t, n.ConfDir, []string{n.BinDir})
	podCIDR := cnitest.FreeSubnet(t)
	if err := c.SetPodCIDRs([]string{"nonsense"}); err == nil {
		t.Fatal("bad pod CIDR accepted")
	}
	if err := c.SetPodCIDRs([]string{podCIDR.String()}); err != nil {
		t.Fatal(err)
	}
	nss, _ := NewNetNS(t.TempDir())
	path, err := nss.Create(ctx, "cidr")
	if err != nil {
		t.Fatal(err)
	}
	defer nss.Remove(ctx, path)
	pod := &Pod{ID: "cidr", Name: "p", Namespace: "ns", UID: "u", NetNS: path}
	res, err := c.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if !podCIDR.Contains(res.IPs[0]) {
		t.Errorf("IP %s not from the pod CIDR %s", res.IPs[0], podCIDR)
	}
	if err := c.Teardown(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// A DEL that libcni has no cached ADD result for must still undo the
// firewall plugin's per-pod rules, which its DEL finds by prevResult only.
func TestTeardownWithoutCachedResultUndoesFirewall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	cases := []struct {
		name string
		// failAfter appends a plugin that fails ADD after the firewall ran.
		failAfter bool
	}{
		{name: "ADD finished but was never cached (berth killed during it)"},
		{name: "ADD failed after the firewall plugin", failAfter: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := cnitest.NewNet(t)
			bins := []string{n.BinDir}
			if tc.failAfter {
				bins = cnitest.AddFailingPlugin(t, "failer", false)
				conf := n.Conflist("bridge")
				conf["plugins"] = append(conf["plugins"].([]any), map[string]any{"type": "failer"})
				n.WriteConf(t, "10-"+n.Name+".conflist", conf)
			}
			c := newTestCNI(t, n.ConfDir, bins)
			nss, err := NewNetNS(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("fw%d", i)
			path, err := nss.Create(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			defer nss.Remove(ctx, path)
			pod := &Pod{ID: id, Name: "p", Namespace: "ns", UID: "u", NetNS: path}
			_, err = c.Setup(ctx, pod)
			if tc.failAfter {
				if err == nil {
					t.Fatal("Setup succeeded with a failing last plugin")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if got := cnitest.FirewallRules(n.Subnet); len(got) == 0 {
					t.Fatal("the firewall plugin made no rules: the test proves nothing")
				}
				if err := os.RemoveAll(filepath.Join(c.cfg.CacheDir, "results")); err != nil {
					t.Fatal(err)
				}
				if err := c.Teardown(ctx, pod); err != nil {
					t.Fatal(err)
				}
			}
			if got := cnitest.FirewallRules(n.Subnet); len(got) != 0 {
				t.Errorf("firewall rules left: %q", got)
			}
			if got := n.Leases(t); len(got) != 0 {
				t.Errorf("leases left: %v", got)
			}
		})
	}
}
