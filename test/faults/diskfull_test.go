package faults_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestDiskFullPull: an image bigger than the disk (berth-test/big, 5 x 20
// MiB that do not compress) fails to pull with an error that says the
// disk is full, and leaves nothing of itself: no image listed, no blob,
// layer or temp file, the space given back. A small image pulls fine
// afterwards.
func TestDiskFullPull(t *testing.T) {
	e, disk := newDiskEnv(t, "faults-diskpull", "30m")
	big := framework.TestRegistry(t) + "/berth-test/big:latest"
	before := framework.SnapshotHost(t, e.Scope())
	used := diskUsed(t, disk)

	ctx := framework.Ctx(t)
	_, err := e.D.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: big}})
	if err == nil {
		t.Fatalf("pulled %s (100 MiB) onto a 30 MiB disk", big)
	}
	t.Logf("PullImage %s: %v", big, err)
	if code := status.Code(err); code != codes.ResourceExhausted || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("pull onto a full disk: code %s, %q; want ResourceExhausted naming 'no space left on device'", code, err)
	}
	imgs, err := e.D.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(imgs.Images) != 0 {
		t.Errorf("ListImages after a failed pull: %v (%v), want none", imgs.GetImages(), err)
	}
	framework.CheckHost(t, before)
	if now := diskUsed(t, disk); now > used+1<<20 {
		t.Errorf("disk use after the failed pull: %d bytes, %d before", now, used)
	}

	pull(t, e.D, e.Image)
	pod, cfg := runPod(e, "afterfull", nil)
	id := e.Run(pod, cfg, "c", "echo ok", nil)
	if st := e.WaitExit(id, settle); st.ExitCode != 0 {
		t.Errorf("container from an image pulled after the failed pull: exit %d (%s)", st.ExitCode, st.Message)
	}
	stopAndRemove(e, pod)
}
