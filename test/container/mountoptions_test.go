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

// TestMountOptions: a CRI mount's mount_options (noexec, nodev, nosuid)
// are applied to its bind mount, the same directory mounted without them
// is not, berth says it supports them, and an option beside those three
// is refused naming it, leaving nothing made.
func TestMountOptions(t *testing.T) {
	e := newEnv(t)
	st, err := e.d.Runtime.Status(framework.Ctx(t), &runtimeapi.StatusRequest{})
	if err != nil || !st.GetFeatures().GetMountOptions() {
		t.Fatalf("RuntimeFeatures.mount_options not reported: %v %v", st.GetFeatures(), err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	podCfg := e.podConfig("mountopts")
	pod := e.runPod(podCfg)
	cfg := e.ctrConfig("app", "sleep 1000")
	cfg.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/plain", HostPath: dir},
		{ContainerPath: "/locked", HostPath: dir, MountOptions: []string{"noexec", "nodev", "nosuid"}},
	}
	id := e.run(pod, podCfg, cfg)

	if r := e.exec(id, 10, "/plain/run.sh"); r.ExitCode != 0 || string(r.Stdout) != "ran\n" {
		t.Errorf("run from the plain mount: exit %d, %q %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	// Through a shell: exec'ing it directly fails the exec itself.
	if r := e.exec(id, 10, "sh", "-c", "/locked/run.sh"); r.ExitCode != 126 {
		t.Errorf("a program on a noexec mount: exit %d, %q %q; want 126 (permission denied)", r.ExitCode, r.Stdout, r.Stderr)
	}
	r := e.exec(id, 10, "cat", "/proc/self/mountinfo")
	for _, line := range strings.Split(string(r.Stdout), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		opts := "," + f[5] + ","
		switch f[4] {
		case "/locked":
			for _, o := range []string{"noexec", "nodev", "nosuid"} {
				if !strings.Contains(opts, ","+o+",") {
					t.Errorf("/locked is mounted %s, without %s", f[5], o)
				}
			}
		case "/plain":
			if strings.Contains(opts, ",noexec,") {
				t.Errorf("/plain is mounted %s", f[5])
			}
		}
	}

	count := func() int {
		resp, err := e.d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Containers)
	}
	before := count()
	bad := e.ctrConfig("bad", "true")
	bad.Mounts = []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: dir, MountOptions: []string{"exec"}}}
	_, err = e.d.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "mount_options[0]") || !strings.Contains(err.Error(), `"exec"`) {
		t.Errorf("an unknown mount option: %v, want InvalidArgument naming it", err)
	}
	if after := count(); after != before {
		t.Errorf("a refused create left a container: %d before, %d after", before, after)
	}
}
