package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/monitor/spawn"
	"github.com/berth-runtime/berth/test/framework"
)

// spawnHelperOf is the pid of the spawn helper the pod's monitor runs.
func spawnHelperOf(t *testing.T, monitorPid int) int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", monitorPid))
	for _, task := range tasks {
		data, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(data)) {
			pid, _ := strconv.Atoi(f)
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if exe, _, _ := bytes.Cut(cmd, []byte{0}); strings.HasSuffix(string(exe), "/berth-spawn") {
				return pid
			}
		}
	}
	t.Fatalf("monitor %d runs no berth-spawn", monitorPid)
	return 0
}

// TestSpawnHelperKilled: the monitor's spawn helper is SIGKILLed at each
// of its steps, in a CreateContainer and in an ExecSync. Killed before it
// answered, the create fails naming the helper and leaves nothing (the
// container's state, cgroup and init are destroyed, the pod serves on);
// killed after, the container or exec process runs on as the monitor's
// and works to the end. Nothing is left on the host.
func TestSpawnHelperKilled(t *testing.T) {
	for _, tt := range []struct {
		point     string
		createErr bool
	}{
		{spawn.PointCreated, true},
		{spawn.PointStarted, true},
		{spawn.PointReported, false},
	} {
		t.Run(tt.point, func(t *testing.T) {
			e := framework.NewPodEnv(t, "berth-spawnkill")
			c := &crasher{t: t, e: e}
			before := framework.SnapshotHost(t, crashScope(e))
			marker := c.arm(tt.point)
			cfg := c.podConfig("spawn")
			pod := c.runPod(cfg)
			mon := framework.MonitorOf(t, pod, pausePid(e, pod))

			// killAt issues call, waits for the helper to reach the point,
			// SIGKILLs it and returns the call's error.
			killAt := func(call func(ctx context.Context) error) error {
				t.Helper()
				os.Remove(marker)
				done := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					done <- call(ctx)
				}()
				deadline := time.Now().Add(30 * time.Second)
				for {
					if _, err := os.Stat(marker); err == nil {
						break
					}
					select {
					case err := <-done:
						t.Fatalf("the call returned (%v) without reaching %s", err, tt.point)
					default:
					}
					if time.Now().After(deadline) {
						t.Fatalf("the helper did not reach %s within 30 s", tt.point)
					}
					time.Sleep(20 * time.Millisecond)
				}
				if err := syscall.Kill(spawnHelperOf(t, mon), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					return err
				case <-time.After(30 * time.Second):
					t.Fatalf("the call did not return within 30 s of the helper's death")
					return nil
				}
			}
			var id string
			err := killAt(func(ctx context.Context) error {
				resp, err := e.D.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: c.ctrConfig(), SandboxConfig: cfg})
				if err == nil {
					id = resp.ContainerId
				}
				return err
			})
			if tt.createErr {
				if err == nil || !strings.Contains(err.Error(), "helper ended without an answer") {
					t.Fatalf("CreateContainer with its helper killed at %s: %v, want the helper named", tt.point, err)
				}
				if runc, _ := os.ReadDir(filepath.Join(e.D.State, "runc")); len(runc) != 0 {
					t.Errorf("libcontainer state left by the failed create: %v", runc)
				}
			} else {
				if err != nil {
					t.Fatalf("CreateContainer with its helper killed after its answer: %v", err)
				}
				c.start(id)
				if pid := c.ctrPid(id); pid == "" {
					t.Fatalf("container %s does not run", id)
				} else if ppid := framework.ParentPID(t, atoi(pid)); ppid != mon {
					t.Errorf("container %s's parent is %d, not its monitor %d", id, ppid, mon)
				}
				var res *runtimeapi.ExecSyncResponse
				err := killAt(func(ctx context.Context) error {
					var err error
					res, err = e.D.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo out; exit 5"}, Timeout: 20})
					return err
				})
				if err != nil || string(res.Stdout) != "out\n" || res.ExitCode != 5 {
					t.Errorf("ExecSync with its helper killed after its answer: %+v %v", res, err)
				}
			}
			c.e.D.SetEnv()
			c.removeAll()
			framework.CheckHost(t, before)
		})
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
