package faults_test

import (
	"context"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// loadBadCall is a call no well-behaved kubelet makes, and the code berth
// must answer it with.
type loadBadCall struct {
	rpc  string
	want codes.Code
	do   func(ctx context.Context, c *loadClient, unknown string) error
}

// loadBadCalls: unknown ids (NotFound, or OK where the CRI makes the call
// idempotent) and invalid arguments (InvalidArgument).
var loadBadCalls = []loadBadCall{
	{"ContainerStatus(unknown)", codes.NotFound, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		return err
	}},
	{"PodSandboxStatus(unknown)", codes.NotFound, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		return err
	}},
	{"StartContainer(unknown)", codes.NotFound, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		return err
	}},
	{"StopContainer(unknown)", codes.OK, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
		return err
	}},
	{"RemoveContainer(unknown)", codes.OK, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		return err
	}},
	{"ContainerStats(unknown)", codes.NotFound, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
		return err
	}},
	{"ExecSync(unknown)", codes.NotFound, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
		return err
	}},
	{"ExecSync(no cmd)", codes.InvalidArgument, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id})
		return err
	}},
	{"StopPodSandbox(unknown)", codes.OK, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	}},
	{"RemovePodSandbox(no id)", codes.InvalidArgument, func(ctx context.Context, c *loadClient, _ string) error {
		_, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{})
		return err
	}},
	{"RunPodSandbox(no metadata)", codes.InvalidArgument, func(ctx context.Context, c *loadClient, _ string) error {
		_, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}})
		return err
	}},
	{"CreateContainer(unknown pod)", codes.NotFound, func(ctx context.Context, c *loadClient, id string) error {
		_, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: id,
			Config:       &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "x"}, Image: &runtimeapi.ImageSpec{Image: c.env.image}},
		})
		return err
	}},
	{"PullImage(invalid)", codes.InvalidArgument, func(ctx context.Context, c *loadClient, _ string) error {
		_, err := c.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "Not//A:Reference!"}})
		return err
	}},
	{"ImageStatus(no image)", codes.InvalidArgument, func(ctx context.Context, c *loadClient, _ string) error {
		_, err := c.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{})
		return err
	}},
}

// misbehave makes one bad call with a fresh unknown id. An image that is
// not there is no error (the CRI answers it with no image), so that is
// checked on the answer.
func (c *loadClient) misbehave() {
	i := c.rng.IntN(len(loadBadCalls) + 1)
	if i == len(loadBadCalls) {
		st, err := loadCall(c, "ImageStatus(absent)", func(ctx context.Context) (*runtimeapi.ImageStatusResponse, error) {
			return c.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "example.invalid/absent:" + framework.RandHex(4)}})
		})
		if err == nil && st.Image != nil {
			c.env.rec.fail("ImageStatus(absent): got image %s", st.Image.Id)
		}
		return
	}
	bc := loadBadCalls[i]
	unknown := framework.RandHex(32)
	loadExpect(c, bc.rpc, bc.want, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, bc.do(ctx, c, unknown)
	})
}
