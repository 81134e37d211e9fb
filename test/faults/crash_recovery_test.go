package faults_test

import (
	"context"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	fp "github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/test/framework"
)

// TestCrashDuringRecovery: berth dies inside a call, then dies again
// while its next start undoes what the first crash left. The start after
// that must finish the job: berth serves, everything can be removed, and
// the host holds what it held before.
func TestCrashDuringRecovery(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-crashrec")
	for _, tc := range []struct{ first, second string }{
		{fp.RunPauseStarted, fp.RecoverPodReleased},
		{fp.RunCNIAdded, fp.RecoverPodReleased},
		{fp.CreateMonitor, fp.RecoverCtrKilled},
		{fp.CreateRootfs, fp.RecoverCtrKilled},
	} {
		name := strings.ReplaceAll(tc.first+"_then_"+tc.second, "/", "_")
		t.Run(name, func(t *testing.T) {
			c := &crasher{t: t, e: e}
			before := framework.SnapshotHost(t, crashScope(e))
			marker := c.arm(tc.first)
			podCfg := c.podConfig("rec")
			var call crashCall
			if strings.HasPrefix(tc.first, "RunPodSandbox/") {
				call = func(ctx context.Context) error {
					_, err := e.D.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
					return err
				}
			} else {
				pod := c.runPod(podCfg)
				call = func(ctx context.Context) error {
					_, err := e.D.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
						PodSandboxId: pod, Config: c.ctrConfig(), SandboxConfig: podCfg})
					return err
				}
			}
			c.hang(marker, call)
			c.crashInRecovery(tc.second)
			c.removeAll()
			framework.CheckHost(t, before)
		})
	}
}
