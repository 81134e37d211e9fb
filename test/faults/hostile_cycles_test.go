package faults_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestHostileCycles: pods of containers that make termination hard, made,
// started, stopped and removed over and over, as the kubelet does:
// one ignores SIGTERM, one forks until its pod's pids.max and goes on
// forking, one is a PID 1 that leaves its children as zombies, and every
// tenth cycle one sits in D on a FUSE mount that stopped answering (its
// stop must fail in time saying so, then succeed once the connection is
// aborted). Every call must answer within its grace + 6 s; at the end
// nothing of any cycle is left on the host: cgroups, netns pins, IP
// leases, NAT rules, mounts, processes, files.
//
// BERTH_HOSTILE_CYCLES sets the number of cycles (20 by default, the test
// command's; hack/hostile-cycles runs 1,000).
func TestHostileCycles(t *testing.T) {
	cycles := 20
	if v := os.Getenv("BERTH_HOSTILE_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BERTH_HOSTILE_CYCLES=%q: want a positive number", v)
		}
		cycles = n
	}
	e := framework.NewPodEnv(t, "faults-hostile")
	scope := e.Scope()
	scope.NAT = true
	before := framework.SnapshotHost(t, scope)

	// The kubelet's pod-level pids limit: a cgroup parent with pids.max,
	// under which each pod's cgroup is made.
	parent := e.Parent + "/pidlimited"
	pidsMax := framework.CgroupFile(parent, "pids", "pids.max", "pids.max")
	pidsDir := filepath.Dir(pidsMax)
	if err := os.MkdirAll(pidsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if framework.CgroupV2() {
		// A v2 cgroup has pids.max only where its parent hands it the
		// controller, all the way down from the root.
		for dir := pidsDir; dir != "/sys/fs/cgroup"; {
			dir = filepath.Dir(dir)
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0o644); err != nil {
				t.Fatalf("enable pids in %s: %v", dir, err)
			}
		}
	}
	if err := os.WriteFile(pidsMax, []byte("48"), 0o644); err != nil {
		t.Fatalf("pids.max: %v", err)
	}

	// BERTH_HOSTILE_MAX_DURATION ends a long run early, cleanly, with the
	// number of cycles done (a go test -timeout would leave its pods).
	var budget time.Duration
	if v := os.Getenv("BERTH_HOSTILE_MAX_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("BERTH_HOSTILE_MAX_DURATION=%q: %v", v, err)
		}
		budget = d
	}
	start := time.Now()
	var stuckStops int
	var retries atomic.Int32
	done := 0
	for i := range cycles {
		if t.Failed() {
			t.Fatalf("cycle %d failed", i)
		}
		if budget > 0 && time.Since(start) > budget {
			t.Logf("stopping after %d of %d cycles: BERTH_HOSTILE_MAX_DURATION=%s reached", i, cycles, budget)
			break
		}
		stuckStops += hostileCycle(t, e, parent, i, i%10 == 0, &retries)
		done++
		if (i+1)%50 == 0 {
			t.Logf("%d cycles in %s", i+1, time.Since(start).Round(time.Second))
		}
	}
	took := time.Since(start)
	// What a last exit is still releasing gets 20 s, as CheckHost gives.
	var diff []string
	counts := map[string]int{}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		diff, counts = nil, map[string]int{}
		for _, d := range before.Diff(framework.SnapshotHost(t, scope)) {
			if strings.HasSuffix(d, parent) {
				continue // the parent itself is the test's, as a pod cgroup is the kubelet's
			}
			diff = append(diff, d)
			kind := strings.Fields(d)[1]
			if strings.Contains(d, "/netns/") {
				kind = "netns"
			}
			counts[kind]++
		}
		if len(diff) == 0 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%d hostile cycles in %s (%s each), %d stops of a container in D failed in time as they should, %d tries of a stop or remove failed in time naming what still ran and were retried; left over: cgroups %d, netns %d, leases %d, NAT rules %d, mounts %d, processes %d, files %d",
		done, took.Round(time.Second), (took / time.Duration(max(done, 1))).Round(time.Millisecond), stuckStops, retries.Load(),
		counts["cgroup"], counts["netns"], counts["lease"], counts["iptables"], counts["mount"], counts["process"], counts["file"])
	if len(diff) > 0 {
		t.Errorf("left on the host after %d cycles (%d items):\n\t%s", done, len(diff), strings.Join(diff, "\n\t"))
	}
	framework.RemoveCgroup(parent)
}

// retried calls fn as the kubelet does a stop or remove: again after a
// failure, which may come of a slow exit or a slow CNI DEL on a loaded
// machine (berth gives a process 5 s after SIGKILL, and a caller the DEL
// until just before its deadline, then answers what is still running).
// Each failure must be berth's answer naming what it waited for, never
// the caller's own deadline cutting it off; the fourth retry at the
// latest must succeed. retries counts the failed tries.
func retried(t *testing.T, what string, d time.Duration, retries *atomic.Int32, fn func(ctx context.Context) error) error {
	t.Helper()
	err := within(t, what, d, fn)
	for try := 1; err != nil && try <= 4; try++ {
		if msg := status.Convert(err).Message(); msg == context.DeadlineExceeded.Error() || strings.Contains(msg, "RST_STREAM") {
			return fmt.Errorf("berth did not answer by the deadline: %w", err)
		}
		retries.Add(1)
		err = within(t, fmt.Sprintf("%s (retry %d)", what, try), d, fn)
	}
	return err
}

// hostileCycle runs one pod through its life; it returns how many stops
// failed (in time, naming the stuck process) as they had to.
func hostileCycle(t *testing.T, e *framework.PodEnv, parent string, i int, dstate bool, retries *atomic.Int32) int {
	t.Helper()
	rt := e.D.Runtime
	name := fmt.Sprintf("hostile-%d", i)
	const grace = time.Second
	// Odd cycles share the pod's PID namespace (pause is the init that
	// reaps), even ones, the D cycles among them, have one per container
	// (the kubelet's default).
	ns := &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	if i%2 == 1 {
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	pod, cfg := e.RunPodWith(name, func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.CgroupParent = parent
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}
	})
	withNS := func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}}
	}
	slowCPU := func(c *runtimeapi.ContainerConfig) {
		withNS(c)
		c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000}
	}
	ctrs := []string{
		// The ignored SIGTERM stays ignored through the exec.
		e.Run(pod, cfg, "noterm", "trap '' TERM; exec sleep 100000", withNS),
		e.Run(pod, cfg, "zombies", "for i in 1 2 3 4 5 6 7 8; do sleep 0 & done; exec sleep 100000", withNS),
	}
	var vol *stuckFS
	var reader string
	if dstate {
		vol = mountStuckFS(t, filepath.Join(t.TempDir(), "vol"))
		reader = e.Run(pod, cfg, "reader", "trap '' TERM; while :; do ls /vol >/dev/null; sleep 0.1; done", func(c *runtimeapi.ContainerConfig) {
			withNS(c)
			hostPathVolume(vol.Dir, "/vol")(c)
		})
	}
	stuck := 0
	if dstate {
		// Hung before the bomb runs: a shell that cannot fork exits.
		vol.Hang()
		blockedIn(t, e, reader)
	}
	// Last: once it runs, the pod can fork no more.
	ctrs = append(ctrs, e.Run(pod, cfg, "forkbomb", "f() { f | f & }; f & exec sleep 100000", slowCPU))
	time.Sleep(300 * time.Millisecond) // let the bomb reach pids.max
	if dstate {
		err := within(t, "StopContainer of a container in D", killGrace+stopSlack, func(ctx context.Context) error {
			_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: reader, Timeout: int64(killGrace / time.Second)})
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "uninterruptible") {
			t.Errorf("cycle %d: StopContainer of a container in D: %v, want an error naming the stuck process", i, err)
		} else {
			stuck++
		}
		vol.Abort()
		ctrs = append(ctrs, reader)
	}
	var wg sync.WaitGroup
	for _, id := range ctrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := retried(t, "StopContainer", grace+stopSlack, retries, func(ctx context.Context) error {
				_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64(grace / time.Second)})
				return err
			}); err != nil {
				t.Errorf("cycle %d: StopContainer %s: %v", i, id, err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ctrs {
		if err := retried(t, "RemoveContainer", stopSlack, retries, func(ctx context.Context) error {
			_, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		}); err != nil {
			t.Errorf("cycle %d: RemoveContainer %s: %v", i, id, err)
		}
	}
	if err := retried(t, "StopPodSandbox", stopSlack, retries, func(ctx context.Context) error {
		_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
		return err
	}); err != nil {
		t.Errorf("cycle %d: StopPodSandbox: %v", i, err)
	}
	if err := retried(t, "RemovePodSandbox", stopSlack, retries, func(ctx context.Context) error {
		_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})
		return err
	}); err != nil {
		t.Errorf("cycle %d: RemovePodSandbox: %v", i, err)
	}
	return stuck
}
