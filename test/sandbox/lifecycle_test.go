package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

func TestFailingPluginLeavesNothing(t *testing.T) {
	// bridge takes a lease, then the next plugin refuses the pod: the
	// failed RunPodSandbox must give the lease back and undo the rest.
	e := newEnv(t, func(o *envOptions) {
		o.prepare = func(n *cnitest.Net) (string, []string) {
			dir := t.TempDir()
			n.ConfDir = dir
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
			return dir, cnitest.AddFailingPlugin(t, "failer", false)
		}
	})
	_, err := e.d.Runtime.RunPodSandbox(framework.Ctx(t), &runtimeapi.RunPodSandboxRequest{Config: e.config("x")})
	if err == nil || !strings.Contains(status.Convert(err).Message(), cnitest.FailingPluginMessage) {
		t.Fatalf("RunPodSandbox = %v, want the plugin's message", err)
	}
	resp, err := e.d.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(resp.Items) != 0 {
		t.Errorf("pods after a failed run: %v, %v", resp.GetItems(), err)
	}
	for _, dir := range []string{"sandboxes", "netns"} {
		entries, _ := os.ReadDir(filepath.Join(e.d.State, dir))
		if len(entries) != 0 {
			t.Errorf("%s/%s not empty: %v", e.d.State, dir, entries)
		}
	}
	if leases := e.net.Leases(t); len(leases) != 0 {
		t.Errorf("leases left: %v", leases)
	}
	if kids := framework.CgroupDirs([]string{e.parent}); len(kids) != 0 {
		t.Errorf("cgroups left: %v", kids)
	}
	if pids, _ := os.ReadFile(framework.CgroupProcs(e.parent)); len(pids) != 0 {
		t.Errorf("processes left: %s", pids)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), e.d.State) {
		t.Error("mounts left under the state dir")
	}
}

func TestBrokenConfigFailsRunAndNetworkNotReady(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.prepare = func(n *cnitest.Net) (string, []string) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "10-broken.conflist"), []byte(`{"cniVersion": "1.0.0", "name": `), 0o644)
			return dir, []string{n.BinDir}
		}
	})
	st, err := e.d.Runtime.Status(framework.Ctx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Status.Conditions {
		if c.Type == runtimeapi.NetworkReady && (c.Status || !strings.Contains(c.Message, "10-broken.conflist")) {
			t.Errorf("NetworkReady = %v, want false naming the broken file", c)
		}
	}
	_, err = e.d.Runtime.RunPodSandbox(framework.Ctx(t), &runtimeapi.RunPodSandboxRequest{Config: e.config("x")})
	if err == nil || !strings.Contains(err.Error(), "10-broken.conflist") {
		t.Fatalf("RunPodSandbox = %v, want the config error", err)
	}
	entries, _ := os.ReadDir(filepath.Join(e.d.State, "sandboxes"))
	pins, _ := os.ReadDir(filepath.Join(e.d.State, "netns"))
	if len(entries)+len(pins) != 0 {
		t.Errorf("left: %v %v", entries, pins)
	}
}

func TestKilledBerthKeepsPodsReady(t *testing.T) {
	e := newEnv(t)
	idA, idB := e.run(e.config("a")), e.run(e.config("b"))
	stA, infoA := e.status(idA)
	stB, infoB := e.status(idB)
	monA := framework.MonitorOf(e.t, idA, infoA.Pid)
	e.stop(idB) // one stopped pod must come back stopped
	e.d.Kill()
	if !framework.Running(infoA.Pid) {
		t.Fatal("pause died with berth")
	}
	// Pause is not orphaned to init: its parent is still its pod's monitor.
	if ppid := framework.ParentPID(t, infoA.Pid); ppid != monA {
		t.Errorf("after berth's death pause's parent is %d, want the monitor %d", ppid, monA)
	}
	e.d.Restart()
	st, info := e.status(idA)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Network.Ip != stA.Network.Ip || info.Pid != infoA.Pid {
		t.Errorf("after restart: %v %s pid %d; want ready, %s, pid %d", st.State, st.Network.Ip, info.Pid, stA.Network.Ip, infoA.Pid)
	}
	// The restarted berth watches pause through the same monitor.
	if framework.MonitorOf(e.t, idA, info.Pid) != monA {
		t.Error("pause has another parent after the restart")
	}
	syscall.Kill(infoA.Pid, syscall.SIGKILL)
	e.waitNotReady(idA)
	if st, _ := e.status(idB); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("stopped pod after restart: %v", st.State)
	}
	// The restarted daemon still owns the pod: it stops and removes it.
	e.stop(idA)
	e.remove(idA)
	e.remove(idB)
	for id, cg := range map[string]string{idA: infoA.CgroupPath, idB: infoB.CgroupPath} {
		if left := e.leftovers(id, cg); len(left) > 0 {
			t.Errorf("left of %s: %v", id, left)
		}
	}
	if leases := e.net.Leases(t); len(leases) != 0 {
		t.Errorf("leases left: %v (b had %s)", leases, stB.Network.Ip)
	}
}

func TestRetriedRunPodSandboxGetsFirstPod(t *testing.T) {
	// A first plugin that takes a second makes RunPodSandbox slower than
	// the client's patience, as a slow CNI would make it for the kubelet.
	e := newEnv(t, func(o *envOptions) {
		o.prepare = func(n *cnitest.Net) (string, []string) {
			slow := t.TempDir()
			script := "#!/bin/sh\ncase \"$CNI_COMMAND\" in ADD) sleep 1; echo '{\"cniVersion\":\"1.0.0\"}';; VERSION) echo '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"1.0.0\"]}';; esac\nexit 0\n"
			os.WriteFile(filepath.Join(slow, "slow"), []byte(script), 0o755)
			dir := t.TempDir()
			n.ConfDir = dir
			n.WriteConf(t, "10-slow.conflist", map[string]any{
				"cniVersion": "1.0.0", "name": n.Name,
				"plugins": []any{
					map[string]any{"type": "slow"},
					map[string]any{"type": "bridge", "bridge": n.Bridge, "isGateway": true, "ipam": map[string]any{
						"type": "host-local", "dataDir": n.DataDir,
						"ranges": [][]map[string]string{{{"subnet": n.Subnet.String()}}},
					}},
				},
			})
			return dir, []string{slow, n.BinDir}
		}
	})
	cfg := e.config("slow")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("first RunPodSandbox = %v, want the client's deadline", err)
	}
	// The retry comes while the first call is still at work.
	id := e.run(cfg)
	again := e.run(cfg)
	if again != id {
		t.Errorf("retry after completion returned %s, want %s", again, id)
	}
	resp, err := e.d.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(resp.Items) != 1 || resp.Items[0].Id != id {
		t.Fatalf("pods = %v, %v; want only %s", resp.GetItems(), err, id)
	}
	if st, _ := e.status(id); st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("state = %v", st.State)
	}
	if leases := e.net.Leases(t); len(leases) != 1 {
		t.Errorf("leases = %v, want 1", leases)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	ctx := framework.Ctx(t)
	noUID := e.config("x")
	noUID.Metadata.Uid = ""
	tests := []struct {
		name string
		call func() error
		want codes.Code
		msg  string
	}{
		{"missing metadata", func() error {
			_, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}})
			return err
		}, codes.InvalidArgument, "config.metadata"},
		{"missing uid", func() error {
			_, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: noUID})
			return err
		}, codes.InvalidArgument, "config.metadata.uid"},
		{"unknown handler", func() error {
			_, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.config("y"), RuntimeHandler: "gvisor"})
			return err
		}, codes.InvalidArgument, "gvisor"},
		{"node-wide sysctl", func() error {
			cfg := e.config("z")
			cfg.Linux.Sysctls = map[string]string{"vm.overcommit_memory": "1"}
			_, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			return err
		}, codes.InvalidArgument, "vm.overcommit_memory"},
		{"status of unknown id", func() error {
			_, err := e.d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "nope"})
			return err
		}, codes.NotFound, "nope"},
		{"stop of unknown id", func() error {
			_, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: "nope"})
			return err
		}, codes.OK, ""},
		{"remove of unknown id", func() error {
			_, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "nope"})
			return err
		}, codes.OK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.want || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Errorf("= %v, want %v mentioning %q", err, tt.want, tt.msg)
			}
		})
	}
	if entries, _ := os.ReadDir(filepath.Join(e.d.State, "sandboxes")); len(entries) != 0 {
		t.Errorf("bad requests left state: %v", entries)
	}
}

func TestDefaultNetworkAndReadiness(t *testing.T) {
	framework.RequireRoot(t)
	subnet := cnitest.FreeSubnet(t)
	bridge := "bd" + framework.RandHex(4)
	t.Cleanup(func() {
		cnitest.DeleteLink(bridge)
	})
	parent := "/berth-e2e-" + framework.RandHex(4)
	t.Cleanup(func() { framework.RemoveCgroup(parent) })
	confDir := filepath.Join(t.TempDir(), "net.d")
	d := framework.StartDaemon(t, framework.WithArgs("--cni-conf-dir", confDir, "--cni-bin-dir", cnitest.PluginDir(t),
		"--default-network", "--default-network-bridge", bridge, "--default-network-subnet", subnet.String()))
	e := &env{t: t, d: d, parent: parent}
	t.Cleanup(e.cleanup)
	if _, err := os.Stat(filepath.Join(confDir, "10-berth.conflist")); err != nil {
		t.Fatalf("default network not written: %v", err)
	}
	if !networkReady(t, d) {
		t.Error("NetworkReady false with the default network")
	}
	id := e.run(e.config("dflt"))
	st, _ := e.status(id)
	inSubnet(t, subnet, st.Network.Ip)
	e.remove(id)

	// NetworkReady follows the conf dir without a restart.
	os.Rename(filepath.Join(confDir, "10-berth.conflist"), filepath.Join(confDir, "berth.conflist.off"))
	if networkReady(t, d) {
		t.Error("NetworkReady true with an empty conf dir")
	}
	os.Rename(filepath.Join(confDir, "berth.conflist.off"), filepath.Join(confDir, "10-berth.conflist"))
	if !networkReady(t, d) {
		t.Error("NetworkReady still false once the config is back")
	}
}

func networkReady(t *testing.T, d *framework.Daemon) bool {
	t.Helper()
	resp, err := d.Runtime.Status(framework.Ctx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Status.Conditions {
		if c.Type == runtimeapi.NetworkReady {
			return c.Status
		}
	}
	t.Fatal(fmt.Sprintf("no NetworkReady condition in %v", resp.Status))
	return false
}
