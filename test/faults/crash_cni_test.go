package faults_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	fp "github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/test/framework"
)

// TestCrashRecoveryWhenCNIDelFails: berth dies inside RunPodSandbox after
// CNI ADD, and when it comes back the network plugin refuses DEL for a
// while, so recovery cannot undo the half-made pod. The pod must not be
// forgotten with its IP, cgroup and record: once the plugin works again,
// the kubelet's stop and remove of what berth lists leave the host as it
// was.
func TestCrashRecoveryWhenCNIDelFails(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-crashcni")
	c := &crasher{t: t, e: e}
	before := framework.SnapshotHost(t, crashScope(e))

	refuse := filepath.Join(t.TempDir(), "refuse-del")
	binDir := flakyBridge(t, e, refuse)
	e.D.Args = append(e.D.Args, "--cni-bin-dir", binDir)

	marker := c.arm(fp.RunCNIAdded)
	cfg := c.podConfig("cnidel")
	if err := os.WriteFile(refuse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Created before the crash: ADD does not look at it.
	c.crash(marker, func(ctx context.Context) error {
		_, err := e.D.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		return err
	})

	// DEL still fails: stopping what berth lists may fail, cleanly.
	ctx := framework.Ctx(t)
	pods, err := e.D.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		_, err := e.D.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id})
		t.Logf("stop pod %s (%s) while DEL fails: %v", p.Id, p.State, err)
	}

	if err := os.Remove(refuse); err != nil {
		t.Fatal(err)
	}
	c.removeAll()
	framework.CheckHost(t, before)
}

// TestStopPodSandboxCallerGivesUp: the client of a StopPodSandbox goes
// away (its connection closed) while a slow CNI DEL runs. The DEL must
// still run to its end: killed half-way, the bridge plugin has deleted the
// pod's link, and with it the only record of the addresses whose NAT
// rules it drops last, so no later DEL can remove them (seen first in
// TestCrashStorm, whose kill closes the connection first). Before the fix
// the closed connection cancelled the DEL and killed the plugin here.
func TestStopPodSandboxCallerGivesUp(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-stopgiveup")
	c := &crasher{t: t, e: e}
	before := framework.SnapshotHost(t, crashScope(e))
	done := filepath.Join(t.TempDir(), "del-done")
	binDir := wrapBridge(t, e, fmt.Sprintf(`if [ "$CNI_COMMAND" = DEL ]; then
	sleep 1
	%q && touch %q
	exit
fi`, filepath.Join(e.Net.BinDir, "bridge"), done))
	e.D.Args = append(e.D.Args, "--cni-bin-dir", binDir)
	e.D.Restart()

	cfg := c.podConfig("giveup")
	pod := c.runPod(cfg)
	// A connection of its own, closed under the call: how berth sees a
	// kubelet that goes away.
	conn, err := grpc.NewClient("unix://"+e.D.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() {
		_, err := runtimeapi.NewRuntimeServiceClient(conn).StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
		stopped <- err
	}()
	time.Sleep(500 * time.Millisecond)
	conn.Close()
	t.Logf("StopPodSandbox whose connection closed under it: %v", <-stopped)

	framework.WaitFile(t, done, settle, "the DEL of a StopPodSandbox whose caller gave up did not finish")
	c.removeAll()
	framework.CheckHost(t, before)
}

// flakyBridge installs, in a bin dir of its own, a plugin that is the
// bridge plugin except that DEL fails while the file refuse exists, and
// makes e's network use it.
func flakyBridge(t *testing.T, e *framework.PodEnv, refuse string) string {
	t.Helper()
	return wrapBridge(t, e, fmt.Sprintf(`if [ "$CNI_COMMAND" = DEL ] && [ -e %q ]; then
	echo '{"cniVersion":"1.0.0","code":999,"msg":"crash test: DEL refused"}'
	exit 1
fi`, refuse))
}

// wrapBridge installs, in a bin dir of its own, a plugin that runs
// prelude (shell) and then the bridge plugin, and makes e's network use
// it.
func wrapBridge(t *testing.T, e *framework.PodEnv, prelude string) string {
	t.Helper()
	dir := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\n%s\nexec %q\n", prelude, filepath.Join(e.Net.BinDir, "bridge"))
	if err := os.WriteFile(filepath.Join(dir, "flaky-bridge"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e.Net.WriteConf(t, "10-"+e.Net.Name+".conflist", e.Net.Conflist("flaky-bridge"))
	return dir
}
