package faults_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// newDiskEnv is a PodEnv whose daemon keeps its root and its state on one
// small tmpfs (the Disk), so that a pull or a container can fill the disk
// that berth's own records are on. Nothing is pulled.
func newDiskEnv(t *testing.T, prefix, size string) (*framework.PodEnv, string) {
	t.Helper()
	e := newPodEnv(t, prefix)
	d := e.D
	// The daemon's dir is only known once it runs: stop it, put the tmpfs
	// in its dir (so that its cleanup unmounts it) and start it there.
	if err := d.Stop(); err != nil {
		t.Fatalf("stop berth to move it onto a tmpfs: %v", err)
	}
	disk := filepath.Join(d.Dir, "disk")
	if err := os.Mkdir(disk, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("berth-disk", disk, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0711"); err != nil {
		t.Fatalf("mount a %s tmpfs on %s: %v", size, disk, err)
	}
	d.Root, d.State = filepath.Join(disk, "root"), filepath.Join(disk, "state")
	d.Args = append(d.Args, "--root", d.Root, "--state", d.State)
	d.Restart()
	return e, disk
}

// diskUsed is how many bytes of the file system at path are in use.
func diskUsed(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return (st.Blocks - st.Bfree) * uint64(st.Bsize)
}

func diskFree(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// corruptRecords lists the records berth moved aside as undecodable
// (internal/store names them <id>.corrupt) anywhere below dir.
func corruptRecords(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(de.Name(), ".corrupt") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func pull(t *testing.T, d *framework.Daemon, image string) {
	t.Helper()
	if _, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		t.Fatalf("pull %s: %v", image, err)
	}
}
