package stats_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestSplitImageFs: with a filesystem of its own at <root>/containers
// (KEP-4191's split image filesystem), ImageFsInfo reports the writable
// layers apart from the images, on that mount, and their usage grows with
// what a container writes; with one filesystem it reports images only.
func TestSplitImageFs(t *testing.T) {
	t.Run("one filesystem", func(t *testing.T) {
		e := newEnv(t)
		fs := imageFsInfo(t, e.D)
		if len(fs.ContainerFilesystems) != 0 {
			t.Fatalf("container filesystems %v on a single filesystem", fs.ContainerFilesystems)
		}
	})
	t.Run("split", func(t *testing.T) {
		root := filepath.Join(framework.TempDir(t), "root")
		layers := filepath.Join(root, "containers")
		if err := os.MkdirAll(layers, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("berth-splitfs", layers, "tmpfs", 0, "size=256m"); err != nil {
			t.Fatalf("mount a tmpfs at %s: %v", layers, err)
		}
		// Registered before the daemon's: unmounted after its pods are gone.
		t.Cleanup(func() {
			if err := unix.Unmount(layers, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", layers, err)
			}
		})
		e := &env{framework.NewPodEnvWith(t, "berth-splitfs-e2e", framework.WithArgs("--root", root))}
		fs := imageFsInfo(t, e.D)
		if len(fs.ContainerFilesystems) != 1 || fs.ContainerFilesystems[0].GetFsId().GetMountpoint() != layers {
			t.Fatalf("container filesystems %v, want one on %s", fs.ContainerFilesystems, layers)
		}
		if img := fs.ImageFilesystems[0].GetFsId().GetMountpoint(); img == layers {
			t.Fatalf("images reported on %s too", img)
		}
		before := fs.ContainerFilesystems[0].GetUsedBytes().GetValue()
		pod, podCfg := e.RunPod("writer")
		e.Run(pod, podCfg, "writer", "dd if=/dev/zero of=/blob bs=1M count=8 && sleep 300", nil)
		deadline := time.Now().Add(60 * time.Second)
		for {
			got := imageFsInfo(t, e.D).ContainerFilesystems[0].GetUsedBytes().GetValue()
			if got >= before+8<<20 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("writable layers use %d bytes, %d before an 8 MiB write", got, before)
			}
			time.Sleep(time.Second)
		}
	})
}

func imageFsInfo(t *testing.T, d *framework.Daemon) *runtimeapi.ImageFsInfoResponse {
	t.Helper()
	fs, err := d.Image.ImageFsInfo(framework.Ctx(t), &runtimeapi.ImageFsInfoRequest{})
	if err != nil || len(fs.ImageFilesystems) != 1 {
		t.Fatalf("ImageFsInfo: %v %v", fs, err)
	}
	return fs
}
