package faults_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestCrashStorm SIGKILLs berth while several clients create, start, stop
// and remove pods and containers at once, wherever each of them happens to
// be: the named fault points cover one call at a time, this covers calls
// in flight together. Whatever was cut off, after the restart berth
// serves, every pod and container it lists can be removed, and the host
// is as before. Three rounds.
func TestCrashStorm(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-storm")
	c := &crasher{t: t, e: e}
	before := framework.SnapshotHost(t, crashScope(e))
	for round := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stormClient(ctx, c, fmt.Sprintf("storm-%d-%d", round, w))
			}()
		}
		// Long enough for every client to be inside some call; where
		// each one is does not matter to what is checked.
		time.Sleep(time.Duration(500+300*round) * time.Millisecond)
		e.D.Kill()
		cancel()
		wg.Wait()
		logged := logSize(e.D.LogPath)
		e.D.Restart()
		c.serves()
		c.monitorsAnswered(logged)
		c.removeAll()
		framework.CheckHost(t, before)
	}
}

// stormClient cycles pods until ctx ends or berth goes away; errors are
// expected once berth is killed, and end it.
func stormClient(ctx context.Context, c *crasher, name string) {
	rt := c.e.D.Runtime
	for i := 0; ctx.Err() == nil; i++ {
		cfg := c.podConfig(fmt.Sprintf("%s-%d", name, i))
		pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			return
		}
		ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod.PodSandboxId, Config: c.ctrConfig(), SandboxConfig: cfg})
		if err != nil {
			return
		}
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
			return
		}
		if i%2 == 0 {
			// Every other pod stays, so that the kill also finds
			// running pods.
			continue
		}
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
			return
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
			return
		}
	}
}
