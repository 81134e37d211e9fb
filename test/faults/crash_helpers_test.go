package faults_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// crashPauseImage is the infra image of the "pauseimage" variant's pods.
func crashPauseImage(e *framework.PodEnv) string {
	return strings.TrimSuffix(e.Image, "library/busybox:latest") + "pause:3.9"
}

// crashUserNS is the user namespace of the "userns" variant's pods.
func crashUserNS() *runtimeapi.UserNamespace {
	mapping := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 1 << 20, Length: 65536}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping}
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
	c.e.D.SetEnv(faultpoint.EnvPoint+"="+point, faultpoint.EnvFile+"="+marker)
	c.e.D.Restart()
	return marker
}

// crash issues call, waits until berth hangs at the armed point, SIGKILLs
// it there and starts it again unarmed.
func (c *crasher) crash(marker string, call crashCall) {
	c.t.Helper()
	c.hang(marker, call)
	c.e.D.SetEnv()
	c.e.D.Restart()
	c.serves()
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
	c.e.D.SetEnv(faultpoint.EnvPoint+"="+point, faultpoint.EnvFile+"="+marker)
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

// ctrPid is the pid a running container's verbose status reports, "" if
// it does not run.
func (c *crasher) ctrPid(id string) string {
	c.t.Helper()
	resp, err := c.e.D.Runtime.ContainerStatus(framework.Ctx(c.t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		c.t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	if resp.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return ""
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.Pid <= 0 {
		c.t.Fatalf("ContainerStatus %s: no pid in verbose info %q: %v", id, resp.Info["info"], err)
	}
	return strconv.Itoa(info.Pid)
}

// newBystander runs the pod that every case leaves alone.
func (c *crasher) newBystander() *crashBystander {
	c.t.Helper()
	cfg := c.podConfig("bystander")
	b := &crashBystander{pod: c.runPod(cfg)}
	b.ctr = c.create(b.pod, cfg)
	c.start(b.ctr)
	b.pid = c.ctrPid(b.ctr)
	return b
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

func (c *crasher) podConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "crash", Uid: "uid-" + name + "-" + framework.RandHex(3)},
		Hostname:     "crash",
		LogDirectory: c.t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: c.e.Parent, SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{}}},
	}
	switch c.variant {
	case "hostnet":
		cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	case "userns":
		cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = crashUserNS()
	case "":
		// A host port: portmap's DNAT rules must go with the pod too.
		_, port, _ := net.SplitHostPort(framework.FreeTCPAddr(c.t))
		p, _ := strconv.Atoi(port)
		cfg.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: int32(p), HostIp: "127.0.0.1"}}
	}
	return cfg
}

func (c *crasher) ctrConfig() *runtimeapi.ContainerConfig {
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: c.e.Image},
		Command:  []string{"sleep", "1000"},
		LogPath:  "app.log",
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{}}},
	}
	switch c.variant {
	case "hostnet":
		cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	case "userns":
		cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = crashUserNS()
	}
	return cfg
}

func (c *crasher) runPod(cfg *runtimeapi.PodSandboxConfig) string {
	c.t.Helper()
	resp, err := c.e.D.Runtime.RunPodSandbox(framework.Ctx(c.t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		c.t.Fatalf("RunPodSandbox: %v", err)
	}
	return resp.PodSandboxId
}

func (c *crasher) create(pod string, podCfg *runtimeapi.PodSandboxConfig) string {
	c.t.Helper()
	resp, err := c.e.D.Runtime.CreateContainer(framework.Ctx(c.t), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod, Config: c.ctrConfig(), SandboxConfig: podCfg})
	if err != nil {
		c.t.Fatalf("CreateContainer: %v", err)
	}
	return resp.ContainerId
}

func (c *crasher) start(id string) {
	c.t.Helper()
	if _, err := c.e.D.Runtime.StartContainer(framework.Ctx(c.t), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		c.t.Fatalf("StartContainer %s: %v", id, err)
	}
}

func (c *crasher) podState(id string) runtimeapi.PodSandboxState {
	c.t.Helper()
	resp, err := c.e.D.Runtime.PodSandboxStatus(framework.Ctx(c.t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		c.t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return resp.Status.State
}

func (c *crasher) ctrState(id string) runtimeapi.ContainerState {
	c.t.Helper()
	resp, err := c.e.D.Runtime.ContainerStatus(framework.Ctx(c.t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		c.t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.Status.State
}

// removeAll is the client giving up on everything: every pod stopped and
// removed, each call checked (the framework's cleanup only logs).
func (c *crasher) removeAll() {
	c.t.Helper()
	ctx := framework.Ctx(c.t)
	pods, err := c.e.D.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		c.t.Fatalf("ListPodSandbox: %v", err)
	}
	for _, p := range pods.Items {
		if c.bystander != nil && p.Id == c.bystander.pod {
			continue
		}
		_, err := c.e.D.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id})
		if err == nil {
			_, err = c.e.D.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id})
		}
		if err != nil {
			c.t.Errorf("pod %s (%s) cannot be removed: %v", p.Id, p.State, err)
		}
	}
	ctrs, err := c.e.D.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		c.t.Fatalf("ListContainers: %v", err)
	}
	for _, ct := range ctrs.Containers {
		if c.bystander == nil || ct.PodSandboxId != c.bystander.pod {
			c.t.Errorf("container %s (%s) still listed after its pod was removed", ct.Id, ct.State)
		}
	}
}

// removeImage removes ref if berth has it.
func (c *crasher) removeImage(ref string) {
	c.t.Helper()
	_, err := c.e.D.Image.RemoveImage(framework.Ctx(c.t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil && status.Code(err) != codes.NotFound {
		c.t.Errorf("RemoveImage %s: %v", ref, err)
	}
}

// removeNamed removes pod's container of that name.
func (c *crasher) removeNamed(pod, name string) {
	c.t.Helper()
	ctx := framework.Ctx(c.t)
	ctrs, err := c.e.D.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod}})
	if err != nil {
		c.t.Fatalf("ListContainers: %v", err)
	}
	for _, ct := range ctrs.Containers {
		if ct.Metadata.GetName() != name {
			continue
		}
		if _, err := c.e.D.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ct.Id}); err != nil {
			c.t.Fatalf("RemoveContainer %s (%s): %v", ct.Id, ct.State, err)
		}
	}
}

// podsNamed lists the pods whose metadata is md's.
func (c *crasher) podsNamed(md *runtimeapi.PodSandboxMetadata) []string {
	c.t.Helper()
	pods, err := c.e.D.Runtime.ListPodSandbox(framework.Ctx(c.t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		c.t.Fatalf("ListPodSandbox: %v", err)
	}
	var ids []string
	for _, p := range pods.Items {
		m := p.Metadata
		if m.GetName() == md.Name && m.GetNamespace() == md.Namespace && m.GetUid() == md.Uid && m.GetAttempt() == md.Attempt {
			ids = append(ids, p.Id)
		}
	}
	return ids
}

// crashScope is what the crash tests check on the host: the pod env's
// scope and its network's NAT rules, which a pod whose CNI DEL never ran
// would leave.
func crashScope(e *framework.PodEnv) framework.HostScope {
	s := e.Scope()
	s.NAT = true
	return s
}
