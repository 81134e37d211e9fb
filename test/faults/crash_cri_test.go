package faults_test

import (
	"net"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// The crash tests' CRI client side: configs of each pod variant, and the
// calls, each failing the case on an error.

// crashPauseImage is the infra image of the "pauseimage" variant's pods.
func crashPauseImage(e *framework.PodEnv) string {
	return strings.TrimSuffix(e.Image, "library/busybox:latest") + "pause:3.9"
}

// crashUserNS is the user namespace of the "userns" variant's pods.
func crashUserNS() *runtimeapi.UserNamespace {
	mapping := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 1 << 20, Length: 65536}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping}
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
	return strconv.Itoa(infoPid(c.t, "ContainerStatus "+id, resp.Info))
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
