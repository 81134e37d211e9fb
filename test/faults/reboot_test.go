package faults_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestReboot: berth comes back from a reboot (state root wiped, images
// kept) reporting no pod and no container, with its images listed and
// usable, and nothing of the old pods left in the persistent root: no
// writable layer, no image lease, no IP lease. Then it does what the
// kubelet asks next: a new pod, a new container. Pods have the built-in
// pause, or one from pause_image (an infra container with a writable
// layer and an image lease of its own).
func TestReboot(t *testing.T) {
	for _, pauseImage := range []bool{false, true} {
		t.Run(map[bool]string{false: "builtin-pause", true: "pause-image"}[pauseImage], func(t *testing.T) {
			var opts []framework.Option
			images := []string{"busybox"}
			if pauseImage {
				// registry.k8s.io is sent to the test registry, which
				// serves test/images/mkimage's pause under that name.
				opts = append(opts, framework.WithConfig(fmt.Sprintf("pause_image = %q\n[registries.\"registry.k8s.io\"]\nmirrors = [\"http://%s\"]\n",
					"registry.k8s.io/pause:3.9", framework.TestRegistry(t))))
				images = append(images, "pause")
			}
			e := newPodEnv(t, "faults-reboot", opts...)
			pull(t, e.D, e.Image)
			if pauseImage {
				pull(t, e.D, "registry.k8s.io/pause:3.9")
			}
			testReboot(t, e, images)
		})
	}
}

func testReboot(t *testing.T, e *framework.PodEnv, images []string) {
	n := e.Net
	before := framework.SnapshotHost(t, e.Scope())
	var old []string
	for _, name := range []string{"web", "db"} {
		pod, cfg := e.RunPod(name)
		old = append(old, pod)
		old = append(old, e.Run(pod, cfg, "main", "exec sleep 100000", nil))
		done := e.Run(pod, cfg, "init", "echo ran", nil)
		e.WaitExit(done, settle)
		old = append(old, done)
	}
	// Two containers a pod, and the infra container with a pause image.
	want := 4 + 2*(len(images)-1)
	layers := dirNames(t, filepath.Join(e.D.Root, "containers"))
	leases := dirNames(t, filepath.Join(e.D.Root, "image", "leases"))
	if len(layers) != want || len(leases) != want || len(n.Leases(t)) != 2 {
		t.Fatalf("before the reboot: %d writable layers, %d image leases, %d IP leases; want %d, %d, 2", len(layers), len(leases), len(n.Leases(t)), want, want)
	}

	e.D.Reboot(t, e.Parent)
	e.D.Restart()

	ctx := framework.Ctx(t)
	pods, err := e.D.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("ListPodSandbox after a reboot: %v (%v), want none", pods.GetItems(), err)
	}
	ctrs, err := e.D.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(ctrs.Containers) != 0 {
		t.Errorf("ListContainers after a reboot: %v (%v), want none", ctrs.GetContainers(), err)
	}
	for _, id := range old {
		if _, err := e.D.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); err == nil {
			t.Errorf("ContainerStatus of %s from before the reboot succeeded", id)
		}
	}
	if left := dirNames(t, filepath.Join(e.D.Root, "containers")); len(left) != 0 {
		t.Errorf("writable layers of containers from before the reboot left in the root: %v", left)
	}
	if left := dirNames(t, filepath.Join(e.D.Root, "image", "leases")); len(left) != 0 {
		t.Errorf("image leases of containers from before the reboot left: %v", left)
	}
	if left := n.Leases(t); len(left) != 0 {
		t.Errorf("IP leases of pods from before the reboot left: %v", left)
	}
	listedImages, err := e.D.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(listedImages.Images) != len(images) {
		t.Fatalf("ListImages after a reboot: %v (%v), want %v", listedImages.GetImages(), err, images)
	}

	// What the kubelet does next: the pod again, from the images on disk.
	pod, cfg := e.RunPod("web")
	id := e.Run(pod, cfg, "main", "echo back after the reboot", nil)
	if st := e.WaitExit(id, settle); st.ExitCode != 0 {
		t.Errorf("container after the reboot: exit %d (%s %s)", st.ExitCode, st.Reason, st.Message)
	}
	logFile := filepath.Join(cfg.LogDirectory, "main.log")
	if b, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(b), "back after the reboot") {
		t.Errorf("log %s: %q, %v", logFile, b, err)
	}
	stopAndRemove(e, pod)
	framework.CheckHost(t, before)

	// No lease of the old containers holds the images' layers: removing
	// them empties the layer store.
	for _, img := range listedImages.Images {
		if _, err := e.D.Image.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: img.Id}}); err != nil {
			t.Fatalf("RemoveImage %s after the reboot: %v", img.RepoTags, err)
		}
	}
	if left := dirNames(t, filepath.Join(e.D.Root, "image", "layers")); len(left) != 0 {
		t.Errorf("layers left after removing every image: %v", left)
	}
}

// dirNames lists a directory's entries; a missing directory is empty.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
