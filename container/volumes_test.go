package container

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/reserve"
)

func TestHolderContainer(t *testing.T) {
	id := reserve.NewID()
	if holderContainer(id) != id || holderContainer(volumeHolder(id, 3)) != id || volumeHolder(id, 3) != id+".mount3" {
		t.Fatal(holderContainer(volumeHolder(id, 3)))
	}
}

func TestPlanImageVolumes(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{
		{ContainerPath: "/h", HostPath: "/tmp"},
		{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
	}}
	vols, err := planImageVolumes("c1", "/state/c1", cfg)
	if err != nil || len(vols) != 1 || vols[0].Mount != 1 || vols[0].Holder != "c1.mount1" || vols[0].Dir != "/state/c1/volumes/1" {
		t.Fatalf("%+v %v", vols, err)
	}
	cfg.Mounts[1].Readonly = false
	if _, err := planImageVolumes("c1", "/state/c1", cfg); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "mounts[1].readonly") {
		t.Fatalf("read-write image volume: %v", err)
	}
}

func TestStatusMounts(t *testing.T) {
	mounts := []*runtimeapi.Mount{
		{ContainerPath: "/h", HostPath: "/tmp"},
		{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
	}
	got := statusMounts(mounts, []ImageVolume{{Mount: 1, ImageID: "sha256:abc"}})
	if got[0] != mounts[0] || got[1].GetImage().GetImageRef() != "sha256:abc" || got[1].GetImage().GetImage() != "busybox" {
		t.Fatalf("%v", got)
	}
	if mounts[1].GetImage().GetImageRef() != "" {
		t.Fatal("the config's mount was changed")
	}
}

func TestResolveInRoot(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"etc", "a/b"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("x"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "abs"))          // absolute: resolved inside root
	os.Symlink("../../etc", filepath.Join(root, "a/b/rel")) // relative
	os.Symlink("/proc/self/root", filepath.Join(root, "magic"))
	os.Symlink("/usr", filepath.Join(root, "escape")) // no /usr in root
	for _, tc := range []struct {
		path, want string
		bad        bool
	}{
		{path: "etc", want: "etc"},
		{path: "etc/passwd", want: "etc/passwd"},
		{path: "/etc", want: "etc"},
		{path: "abs", want: "etc"},
		{path: "abs/passwd", want: "etc/passwd"},
		{path: "a/b/rel", want: "etc"},
		{path: "../../../etc", want: "etc"},
		{path: ".", want: ""},
		{path: "escape", bad: true},
		{path: "missing", bad: true},
		{path: "etc/passwd/x", bad: true},
		{path: "magic", bad: true},
	} {
		got, err := resolveInRoot(root, tc.path)
		want := filepath.Join(root, tc.want)
		if tc.bad != (err != nil) || (!tc.bad && got != want) {
			t.Errorf("resolveInRoot(%q) = %q, %v; want %q (error: %v)", tc.path, got, err, want, tc.bad)
		}
	}
}

// TestMountImageReadOnly mounts one- and two-layer images read-only, with
// a whiteout in the top layer, and unmounts them as removal does.
func TestMountImageReadOnly(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: mounts")
	}
	dir := t.TempDir()
	bottom, top := filepath.Join(dir, "l1"), filepath.Join(dir, "l2")
	for _, d := range []string{filepath.Join(bottom, "bin"), top} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(bottom, "bin/sh"), []byte("#!"), 0o755)
	os.WriteFile(filepath.Join(bottom, "gone"), []byte("x"), 0o644)
	if err := unix.Mknod(filepath.Join(top, "gone"), unix.S_IFCHR, 0); err != nil { // overlay whiteout
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	for name, lower := range map[string][]string{"0": {bottom}, "1": {top, bottom}} {
		target := filepath.Join(state, volumesDir, name)
		if err := mountImageReadOnly(lower, target, nil); err != nil {
			t.Fatalf("%v: %v", lower, err)
		}
		if _, err := os.Stat(filepath.Join(target, "bin/sh")); err != nil {
			t.Errorf("%v: %v", lower, err)
		}
		if err := os.WriteFile(filepath.Join(target, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("%v: write: %v, want EROFS", lower, err)
		}
		_, err := os.Lstat(filepath.Join(target, "gone"))
		if whiteout := len(lower) == 2; whiteout != errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: gone: %v", lower, err)
		}
	}
	if err := unmountImageVolumes(state); err != nil {
		t.Fatal(err)
	}
	if err := unmountImageVolumes(state); err != nil {
		t.Fatalf("second unmount: %v", err)
	}
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(bottom, "bin/sh")); err != nil {
		t.Fatalf("a layer was touched: %v", err)
	}
	if err := unmountImageVolumes(state); err != nil {
		t.Fatalf("unmount without volumes: %v", err)
	}
}
