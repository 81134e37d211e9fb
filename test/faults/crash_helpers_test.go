package faults_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/test/framework"
)

// crasher drives one daemon through crash cases: it arms a fault point,
// restarts berth on it, and plays the kubelet around the crash.
type crasher struct {
	t       *testing.T // the case's
	e       *framework.PodEnv
	variant string // of the pods: "" (pod network), "hostnet", "userns" or "pauseimage"
	// args are the daemon's arguments before any variant's, nil to
	// leave them alone.
	args []string
	// bystander is a pod with a running container that lives through
	// every crash: running work keeps running.
	bystander *crashBystander
}

type crashBystander struct {
	pod, ctr string
	pid      string // the container's, from its verbose status
}

// crashCall is one CRI call, issued once with the fault point armed and
// once more, as the kubelet's retry, after the restart.
type crashCall func(ctx context.Context) error

// arm restarts berth with point armed and returns the marker file that
// berth creates when it gets there.
func (c *crasher) arm(point string) string {
	c.t.Helper()
	marker := filepath.Join(c.t.TempDir(), "reached")
	if c.args != nil {
		c.e.D.Args = slices.Clone(c.args)
		if c.variant == "pauseimage" {
			c.e.D.Args = append(c.e.D.Args, "--pause-image", crashPauseImage(c.e))
		}
	}
	c.e.D.SetEnv(faultpoint.Env(point, marker, 0)...)
	c.e.D.Restart()
	return marker
}

// crash issues call, waits until berth hangs at the armed point, SIGKILLs
// it there and starts it again unarmed.
func (c *crasher) crash(marker string, call crashCall) {
	c.t.Helper()
	c.hang(marker, call)
	logged := logSize(c.e.D.LogPath)
	c.e.D.SetEnv()
	c.e.D.Restart()
	c.serves()
	c.monitorsAnswered(logged)
}

// monitorsAnswered fails the case if the restarted berth logged, past
// offset, a monitor that did not answer its recovery: nothing in a crash
// case freezes one, so it would be a monitor wedged by the crash.
func (c *crasher) monitorsAnswered(offset int64) {
	c.t.Helper()
	b, err := os.ReadFile(c.e.D.LogPath)
	if err != nil || int64(len(b)) < offset {
		return
	}
	for line := range strings.Lines(string(b[offset:])) {
		if strings.Contains(line, "does not answer") {
			c.t.Errorf("after the crash, berth's recovery found a monitor that does not answer: %s", line)
		}
	}
}

func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// hang issues call, waits until berth hangs at the armed point and
// SIGKILLs it there.
func (c *crasher) hang(marker string, call crashCall) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	deadline := time.Now().Add(settle)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		select {
		case err := <-done:
			c.t.Fatalf("the call returned (%v) without reaching the fault point", err)
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("berth did not reach the fault point within %s", settle)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.e.D.Kill()
	// The call dies with the connection; its error says nothing.
	<-done
}

// crashInRecovery starts the killed berth again armed at point, a step
// of its recovery, SIGKILLs it there, and starts it again unarmed.
func (c *crasher) crashInRecovery(point string) {
	c.t.Helper()
	marker := filepath.Join(c.t.TempDir(), "reached-in-recovery")
	c.e.D.SetEnv(faultpoint.Env(point, marker, 0)...)
	c.e.D.Launch()
	deadline := time.Now().Add(settle)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if !c.e.D.Running() {
			c.t.Fatalf("berth exited during its recovery before reaching %s", point)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("berth's recovery did not reach %s within %s", point, settle)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.e.D.Kill()
	what, _ := os.ReadFile(marker)
	c.t.Logf("killed in recovery at %s", strings.TrimSpace(string(what)))
	c.e.D.SetEnv()
	c.e.D.Restart()
	c.serves()
}

// serves checks that the restarted berth answers, and that every pod and
// container it lists is in a state the API knows.
func (c *crasher) serves() {
	c.t.Helper()
	ctx := framework.Ctx(c.t)
	if _, err := c.e.D.Runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		c.t.Fatalf("Version after restart: %v", err)
	}
	pods, err := c.e.D.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		c.t.Fatalf("ListPodSandbox after restart: %v", err)
	}
	for _, p := range pods.Items {
		c.t.Logf("after restart: pod %s %s", p.Id, p.State)
	}
	ctrs, err := c.e.D.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		c.t.Fatalf("ListContainers after restart: %v", err)
	}
	for _, ct := range ctrs.Containers {
		c.t.Logf("after restart: container %s (%s) %s", ct.Id, ct.Metadata.GetName(), ct.State)
	}
	if b := c.bystander; b != nil {
		if st := c.podState(b.pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
			c.t.Errorf("the bystander pod %s is %s after the crash", b.pod, st)
		}
		if pid := c.ctrPid(b.ctr); pid != b.pid {
			c.t.Errorf("the bystander container %s has pid %q after the crash, %q before", b.ctr, pid, b.pid)
		}
	}
}

// clean accepts a retried call's outcome: success, or an error with a
// code that tells the client what happened. Unknown and Internal say
// nothing a kubelet can act on.
func (c *crasher) clean(what string, err error) bool {
	c.t.Helper()
	if err == nil {
		return true
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unknown, codes.Internal, codes.Unavailable, codes.DeadlineExceeded:
		c.t.Errorf("retried %s failed without a clean error: %v", what, err)
	default:
		c.t.Logf("retried %s failed cleanly: %v", what, err)
	}
	if st.Message() == "" {
		c.t.Errorf("retried %s failed with no message: %v", what, err)
	}
	return false
}

// crashScope is what the crash tests check on the host: the pod env's
// scope and its network's NAT rules, which a pod whose CNI DEL never ran
// would leave.
func crashScope(e *framework.PodEnv) framework.HostScope {
	s := e.Scope()
	s.NAT = true
	return s
}
