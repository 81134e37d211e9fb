package container_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestImageVolumes: a CRI mount with an image mounts that image's layers
// read-only (whiteouts applied, executables runnable), whole or at a sub
// path resolved inside the image; the container leases the image, so
// removing the image leaves the volume intact until the container goes;
// status reports the image's ID; a berth restart keeps all of it; and a
// failed create leaves no mount, lease or name behind.
func TestImageVolumes(t *testing.T) {
	e := newEnv(t)
	ctx := framework.Ctx(t)
	reg := framework.TestRegistry(t)
	pulled, err := e.d.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: reg + "/berth-test/whiteout:latest"}})
	if err != nil {
		t.Fatal(err)
	}
	wh := pulled.ImageRef
	busybox := imageID(t, e, e.image)
	layersBefore := countEntries(t, filepath.Join(e.d.Root, "image", "layers"))
	leasesBefore := countEntries(t, filepath.Join(e.d.Root, "image", "leases"))

	podCfg := e.podConfig("imagevol")
	pod := e.runPod(podCfg)
	imageMount := func(path, image, sub string) *runtimeapi.Mount {
		return &runtimeapi.Mount{ContainerPath: path, Readonly: true, Image: &runtimeapi.ImageSpec{Image: image}, ImageSubPath: sub}
	}

	// Refused: each leaves nothing behind.
	for _, tc := range []struct {
		name  string
		mount *runtimeapi.Mount
		code  codes.Code
		field string
	}{
		{"read-write", &runtimeapi.Mount{ContainerPath: "/mnt/iv", Image: &runtimeapi.ImageSpec{Image: wh}}, codes.InvalidArgument, "mounts[0].readonly"},
		{"host path too", &runtimeapi.Mount{ContainerPath: "/mnt/iv", HostPath: "/tmp", Readonly: true, Image: &runtimeapi.ImageSpec{Image: wh}}, codes.InvalidArgument, "mounts[0].host_path"},
		{"missing sub path", imageMount("/mnt/iv", wh, "not-existing"), codes.InvalidArgument, "mounts[0].image_sub_path"},
		{"sub path through a file", imageMount("/mnt/iv", wh, "wh/keep.txt/x"), codes.InvalidArgument, "mounts[0].image_sub_path"},
		{"missing image", imageMount("/mnt/iv", reg+"/berth-test/none:latest", ""), codes.NotFound, "mounts[0].image"},
	} {
		cfg := e.ctrConfig("vol", "sleep 1000")
		cfg.Mounts = []*runtimeapi.Mount{tc.mount}
		_, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want %s naming %s", tc.name, err, tc.code, tc.field)
		}
	}
	if m := stateMounts(t, e); len(m) != 0 {
		t.Fatalf("failed creates left mounts: %v", m)
	}
	if n := countEntries(t, filepath.Join(e.d.Root, "image", "leases")); n != leasesBefore {
		t.Fatalf("failed creates left leases: %d, before %d", n, leasesBefore)
	}

	cfg := e.ctrConfig("vol", "sleep 1000")
	cfg.Mounts = []*runtimeapi.Mount{
		imageMount("/mnt/iv", wh, ""),
		// A symlink to /wh/keep.txt, followed inside the image.
		imageMount("/mnt/keep", wh, "wh/links/abs-symlink"),
		imageMount("/mnt/etc", e.image, "etc"),
	}
	id := e.run(pod, podCfg, cfg)
	check := func(what, script string) {
		t.Helper()
		r := e.exec(id, 10, "sh", "-c", script)
		if r.ExitCode != 0 {
			t.Errorf("%s: exit %d: %s%s", what, r.ExitCode, r.Stdout, r.Stderr)
		}
	}
	checkVolumes := func() {
		t.Helper()
		check("content", `test "$(cat /mnt/iv/wh/keep.txt)" = keep`)
		check("whiteouts", `test ! -e /mnt/iv/wh/gone.txt && test "$(ls /mnt/iv/wh/opaque)" = new.txt`)
		check("read-only", `! touch /mnt/iv/x 2>/dev/null && ! touch /mnt/etc/x 2>/dev/null && ! rm /mnt/iv/wh/keep.txt 2>/dev/null`)
		check("executable", `/mnt/iv/bin/ls /mnt/iv >/dev/null`)
		check("sub path file", `test "$(cat /mnt/keep)" = keep`)
		check("sub path dir", `test -e /mnt/etc/passwd && test ! -e /mnt/etc/etc`)
		st := e.status(id)
		refs := map[string]string{}
		for _, m := range st.Mounts {
			refs[m.ContainerPath] = m.GetImage().GetImageRef()
		}
		if refs["/mnt/iv"] != wh || refs["/mnt/keep"] != wh || refs["/mnt/etc"] != busybox {
			t.Errorf("status mounts' image_ref: %v; want %s and %s", refs, wh, busybox)
		}
	}
	checkVolumes()
	if m := stateMounts(t, e); len(m) != 3 {
		t.Fatalf("volume mounts on the host: %v", m)
	}

	// The image goes, its layers stay while the container uses them.
	if _, err := e.d.Image.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: wh}}); err != nil {
		t.Fatalf("RemoveImage of an image in use: %v", err)
	}
	if st, err := e.d.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: wh}}); err != nil || st.Image != nil {
		t.Fatalf("image status after remove: %v %v", st, err)
	}
	checkVolumes()

	e.d.Restart()
	checkVolumes()

	if _, err := e.d.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if m := stateMounts(t, e); len(m) != 0 {
		t.Fatalf("removal left mounts: %v", m)
	}
	if n := countEntries(t, filepath.Join(e.d.Root, "image", "leases")); n != leasesBefore {
		t.Fatalf("removal left leases: %d, before %d", n, leasesBefore)
	}
	if n := countEntries(t, filepath.Join(e.d.Root, "image", "layers")); n != layersBefore-3 {
		t.Fatalf("%d layers after the removal, %d before: the removed image's 3 own layers should be gone", n, layersBefore)
	}
}

func imageID(t *testing.T, e *env, name string) string {
	t.Helper()
	st, err := e.d.Image.ImageStatus(framework.Ctx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
	if err != nil || st.Image == nil {
		t.Fatalf("image status %s: %v %v", name, st, err)
	}
	return st.Image.Id
}

func countEntries(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(entries)
}

// stateMounts lists the image volume mounts under the daemon's state dir.
func stateMounts(t *testing.T, e *env) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], e.d.State+"/") && strings.Contains(f[4], "/volumes/") {
			out = append(out, f[4])
		}
	}
	return out
}
