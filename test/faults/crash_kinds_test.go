package faults_test

import (
	"context"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// crashFixture is what a case's setup made before the crash, and what
// the client knows.
type crashFixture struct {
	pod    string
	podCfg *runtimeapi.PodSandboxConfig
	ctr    string
}

// crashKind is one CRI call: what it needs made first, the call itself,
// and what the kubelet does after a crash answered it with nothing.
type crashKind struct {
	setup func(c *crasher, f *crashFixture)
	call  func(c *crasher, f *crashFixture) crashCall
	// retry repeats the call after the restart and checks that berth
	// then lets the client go on.
	retry func(c *crasher, f *crashFixture)
}

func crashKinds(e *framework.PodEnv) map[string]crashKind {
	runPod := func(c *crasher, f *crashFixture) {
		f.podCfg = c.podConfig("crash")
		f.pod = c.runPod(f.podCfg)
	}
	withCreated := func(c *crasher, f *crashFixture) {
		runPod(c, f)
		f.ctr = c.create(f.pod, f.podCfg)
	}
	withRunning := func(c *crasher, f *crashFixture) {
		withCreated(c, f)
		c.start(f.ctr)
	}
	return map[string]crashKind{
		"RunPodSandbox": {
			setup: func(c *crasher, f *crashFixture) { f.podCfg = c.podConfig("crash") },
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: f.podCfg})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				resp, err := c.e.D.Runtime.RunPodSandbox(framework.Ctx(c.t), &runtimeapi.RunPodSandboxRequest{Config: f.podCfg})
				if !c.clean("RunPodSandbox", err) {
					return
				}
				// One pod for the name, crash or not.
				if n := c.podsNamed(f.podCfg.Metadata); len(n) != 1 || n[0] != resp.PodSandboxId {
					c.t.Errorf("pods named like the retried RunPodSandbox: %v, want only %s", n, resp.PodSandboxId)
				}
				if st := c.podState(resp.PodSandboxId); st != runtimeapi.PodSandboxState_SANDBOX_READY {
					c.t.Fatalf("retried RunPodSandbox returned pod %s in state %s", resp.PodSandboxId, st)
				}
				// The variant is real: the infra container has a state
				// dir of its own, under the pod's id.
				infra := filepath.Join(c.e.D.State, "containers", resp.PodSandboxId)
				if _, err := os.Stat(infra); (err == nil) != (c.variant == "pauseimage") {
					c.t.Errorf("variant %q: infra container dir %s: %v", c.variant, infra, err)
				}
				// The pod is usable: a container runs in it.
				ctr := c.create(resp.PodSandboxId, f.podCfg)
				c.start(ctr)
			},
		},
		"CreateContainer": {
			setup: runPod,
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
						PodSandboxId: f.pod, Config: c.ctrConfig(), SandboxConfig: f.podCfg})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				req := &runtimeapi.CreateContainerRequest{PodSandboxId: f.pod, Config: c.ctrConfig(), SandboxConfig: f.podCfg}
				resp, err := c.e.D.Runtime.CreateContainer(framework.Ctx(c.t), req)
				if !c.clean("CreateContainer", err) {
					if status.Code(err) != codes.AlreadyExists {
						return
					}
					// The first call's container survived under the
					// name: the kubelet removes what it does not know
					// and creates again.
					c.removeNamed(f.pod, "app")
					if resp, err = c.e.D.Runtime.CreateContainer(framework.Ctx(c.t), req); err != nil {
						c.t.Fatalf("CreateContainer after removing the first call's container: %v", err)
					}
				}
				c.start(resp.ContainerId)
				if st := c.ctrState(resp.ContainerId); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
					c.t.Errorf("container %s created by the retry and started is %s", resp.ContainerId, st)
				}
			},
		},
		"StartContainer": {
			setup: withCreated,
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: f.ctr})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				_, err := c.e.D.Runtime.StartContainer(framework.Ctx(c.t), &runtimeapi.StartContainerRequest{ContainerId: f.ctr})
				c.clean("StartContainer", err)
				// Started by the first call or by the retry, it runs, and
				// says so.
				if st := c.ctrState(f.ctr); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
					c.t.Errorf("container %s is %s after a retried start (error: %v)", f.ctr, st, err)
				}
			},
		},
		"StopPodSandbox": {
			setup: withRunning,
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: f.pod})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				if _, err := c.e.D.Runtime.StopPodSandbox(framework.Ctx(c.t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: f.pod}); err != nil {
					c.t.Fatalf("retried StopPodSandbox: %v", err)
				}
				if st := c.podState(f.pod); st != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
					c.t.Errorf("pod %s is %s after a retried stop", f.pod, st)
				}
				if st := c.ctrState(f.ctr); st != runtimeapi.ContainerState_CONTAINER_EXITED {
					c.t.Errorf("container %s is %s after its pod's retried stop", f.ctr, st)
				}
			},
		},
		"RemovePodSandbox": {
			setup: func(c *crasher, f *crashFixture) {
				withRunning(c, f)
				if _, err := c.e.D.Runtime.StopPodSandbox(framework.Ctx(c.t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: f.pod}); err != nil {
					c.t.Fatalf("StopPodSandbox: %v", err)
				}
			},
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: f.pod})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				if _, err := c.e.D.Runtime.RemovePodSandbox(framework.Ctx(c.t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: f.pod}); err != nil {
					c.t.Fatalf("retried RemovePodSandbox: %v", err)
				}
				pods, err := c.e.D.Runtime.ListPodSandbox(framework.Ctx(c.t), &runtimeapi.ListPodSandboxRequest{})
				if err != nil {
					c.t.Fatal(err)
				}
				for _, p := range pods.Items {
					if p.Id == f.pod {
						c.t.Errorf("pod %s still listed (%s) after a retried remove", f.pod, p.State)
					}
				}
			},
		},
		"StopContainer": {
			setup: withRunning,
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: f.ctr, Timeout: 60})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				if _, err := c.e.D.Runtime.StopContainer(framework.Ctx(c.t), &runtimeapi.StopContainerRequest{ContainerId: f.ctr, Timeout: 1}); err != nil {
					c.t.Fatalf("retried StopContainer: %v", err)
				}
				resp, err := c.e.D.Runtime.ContainerStatus(framework.Ctx(c.t), &runtimeapi.ContainerStatusRequest{ContainerId: f.ctr})
				if err != nil {
					c.t.Fatal(err)
				}
				// Ended by the first call's SIGTERM or the retry's SIGKILL,
				// and reported so.
				if st := resp.Status; st.State != runtimeapi.ContainerState_CONTAINER_EXITED || (st.ExitCode != 143 && st.ExitCode != 137) {
					c.t.Errorf("container %s after a retried stop: %s, exit code %d (want exited by SIGTERM or SIGKILL)", f.ctr, st.State, st.ExitCode)
				}
			},
		},
		"RemoveContainer": {
			setup: withRunning,
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: f.ctr})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				if _, err := c.e.D.Runtime.RemoveContainer(framework.Ctx(c.t), &runtimeapi.RemoveContainerRequest{ContainerId: f.ctr}); err != nil {
					c.t.Fatalf("retried RemoveContainer: %v", err)
				}
				// Its name is free again: the kubelet's next attempt
				// may reuse it.
				c.start(c.create(f.pod, f.podCfg))
			},
		},
		"RemoveImage": {
			setup: func(c *crasher, f *crashFixture) {
				if _, err := c.e.D.Image.PullImage(framework.Ctx(c.t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: crashPullImage(e)}}); err != nil {
					c.t.Fatalf("PullImage: %v", err)
				}
			},
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Image.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: crashPullImage(e)}})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				ref := crashPullImage(e)
				if _, err := c.e.D.Image.RemoveImage(framework.Ctx(c.t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
					c.t.Fatalf("retried RemoveImage: %v", err)
				}
				if st, err := c.e.D.Image.ImageStatus(framework.Ctx(c.t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil || st.Image != nil {
					c.t.Errorf("ImageStatus %s after the retried remove: %v, %v; want no image", ref, st.GetImage(), err)
				}
				// busybox, which shares the base layer, still runs.
				runPod(c, f)
				c.start(c.create(f.pod, f.podCfg))
			},
		},
		"PullImage": {
			call: func(c *crasher, f *crashFixture) crashCall {
				return func(ctx context.Context) error {
					_, err := c.e.D.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: crashPullImage(e)}})
					return err
				}
			},
			retry: func(c *crasher, f *crashFixture) {
				ref := crashPullImage(e)
				// Every pull point is before the image is recorded: a
				// half-pulled image is never listed.
				if st, err := c.e.D.Image.ImageStatus(framework.Ctx(c.t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil || st.Image != nil {
					c.t.Errorf("ImageStatus %s after a crash inside its pull: %v, %v; want no image", ref, st.GetImage(), err)
				}
				if _, err := c.e.D.Image.PullImage(framework.Ctx(c.t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
					c.t.Fatalf("retried PullImage: %v", err)
				}
				st, err := c.e.D.Image.ImageStatus(framework.Ctx(c.t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
				if err != nil || st.Image == nil {
					c.t.Fatalf("ImageStatus %s after the retried pull: %v, %v", ref, st, err)
				}
				// The image is whole: a container runs from it.
				runPod(c, f)
				resp, err := c.e.D.Runtime.CreateContainer(framework.Ctx(c.t), &runtimeapi.CreateContainerRequest{
					PodSandboxId: f.pod, SandboxConfig: f.podCfg, Config: &runtimeapi.ContainerConfig{
						Metadata: &runtimeapi.ContainerMetadata{Name: "pulled"},
						Image:    &runtimeapi.ImageSpec{Image: ref},
						Command:  []string{"sleep", "1000"},
					}})
				if err != nil {
					c.t.Fatalf("CreateContainer from the pulled image: %v", err)
				}
				c.start(resp.ContainerId)
			},
		},
	}
}
