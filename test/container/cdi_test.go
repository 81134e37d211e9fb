package container_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// fakeCDIVendor is a CDI spec of a fake vendor's devices, on the host:
// a character device node (a copy of /dev/null's numbers under a name of
// its own), a directory of "driver files" to mount, and a dir the spec's
// hook writes into.
type fakeCDIVendor struct {
	specDir, devDir, libDir, hookDir string
}

func newFakeCDIVendor(t *testing.T) *fakeCDIVendor {
	t.Helper()
	v := &fakeCDIVendor{specDir: t.TempDir(), devDir: t.TempDir(), libDir: t.TempDir(), hookDir: t.TempDir()}
	var null unix.Stat_t
	if err := unix.Stat("/dev/null", &null); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"fake0", "fake1"} {
		if err := unix.Mknod(filepath.Join(v.devDir, n), unix.S_IFCHR|0o666, int(null.Rdev)); err != nil {
			t.Fatalf("mknod %s: %v", n, err)
		}
	}
	if err := os.WriteFile(filepath.Join(v.libDir, "libfake.so"), []byte("fake driver v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return v
}

// write (re)writes the vendor's spec file the way drivers do, a temp
// file renamed over the old one, with the devices named and env as
// gpu0's FAKE_GPU value.
func (v *fakeCDIVendor) write(t *testing.T, env string, devices ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "cdiVersion: \"0.6.0\"\nkind: vendor.example/fake\ncontainerEdits:\n  env: [\"FAKE_DRIVER=%s\"]\n", env)
	fmt.Fprintf(&b, "  mounts:\n    - hostPath: %s\n      containerPath: /opt/fake\n      options: [ro, nosuid, nodev, bind]\n", v.libDir)
	fmt.Fprintf(&b, "  hooks:\n    - hookName: createRuntime\n      path: /bin/sh\n      args: [sh, -c, 'cat > %s/$FAKE_HOOK_NAME']\n      env: [PATH=/usr/bin:/bin, FAKE_HOOK_NAME=state.json]\n", v.hookDir)
	b.WriteString("devices:\n")
	for i, d := range devices {
		// No type nor numbers: the library reads them from the host node.
		fmt.Fprintf(&b, "  - name: %s\n    containerEdits:\n      env: [\"FAKE_GPU=%s\"]\n      deviceNodes:\n        - path: /dev/fake%d\n          hostPath: %s/fake%d\n",
			d, d, i, v.devDir, i)
	}
	tmp := filepath.Join(v.specDir, ".fake.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.specDir, "vendor.example-fake.yaml")); err != nil {
		t.Fatal(err)
	}
}

// TestCDIDevices: a container asking for a CDI device (cdi_devices, or a
// cdi.k8s.io/ annotation) gets its spec's device node, env, mount and
// hook; an unknown device, a bad name and a broken spec are refused with
// the device and the file named, leaving nothing behind; a spec file
// changed while berth runs counts for the next create.
func TestCDIDevices(t *testing.T) {
	v := newFakeCDIVendor(t)
	v.write(t, "v1", "gpu0")
	e := newEnv(t, framework.WithConfig(fmt.Sprintf("cdi_spec_dirs = [%q]\n", v.specDir)))
	podCfg := e.podConfig("cdi")
	pod := e.runPod(podCfg)

	show := `echo FAKE_GPU=$FAKE_GPU FAKE_DRIVER=$FAKE_DRIVER; stat -c 'fake0=%F %t:%T' /dev/fake0; cat /opt/fake/libfake.so; echo x > /dev/fake0 && echo wrote; sleep 3600`
	cfg := e.ctrConfig("gpu", show)
	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.example/fake=gpu0"}}
	id := e.run(pod, podCfg, cfg)
	out := waitLog(t, e.status(id).LogPath, "wrote")
	for _, want := range []string{"FAKE_GPU=gpu0 FAKE_DRIVER=v1", "fake driver v1"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
	var null unix.Stat_t
	if err := unix.Stat("/dev/null", &null); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("fake0=character special file %x:%x", unix.Major(uint64(null.Rdev)), unix.Minor(uint64(null.Rdev))); !strings.Contains(out, want) {
		t.Errorf("container's /dev lacks the character device fake0 (%s):\n%s", want, out)
	}
	// An exec sees what the container's process does.
	if r := e.exec(id, 10, "sh", "-c", "echo $FAKE_GPU; test -c /dev/fake0 && echo char; grep ' /opt/fake ' /proc/mounts"); r.ExitCode != 0 ||
		!strings.Contains(string(r.Stdout), "gpu0\nchar\n") || !strings.Contains(string(r.Stdout), " ro,") {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want gpu0, char and a read-only /opt/fake", r.ExitCode, r.Stdout, r.Stderr)
	}
	// The createRuntime hook ran with the container's state on stdin.
	if state, err := os.ReadFile(filepath.Join(v.hookDir, "state.json")); err != nil || !strings.Contains(string(state), id) {
		t.Errorf("hook state: %q, %v; want the container's state naming %s", state, err, id)
	}

	// Refused creates: nothing of them may be left (record, rootfs
	// mount, layer, cgroup, process), and the pod holds one container.
	before := framework.SnapshotHost(t, framework.HostScope{Dirs: []string{e.d.Dir}, CgroupParents: []string{e.parent}, Daemons: []*framework.Daemon{e.d}})
	// Another vendor's spec, broken: it does not parse.
	os.WriteFile(filepath.Join(v.specDir, "vendor.example-broken.yaml"), []byte("cdiVersion: \"0.6.0\"\nkind: vendor.example/broken\ndevices:\n  - name: x\n    containerEdits: {env: [1, 2\n"), 0o644)
	for _, tc := range []struct {
		name  string
		tweak func(*runtimeapi.ContainerConfig)
		code  codes.Code
		want  []string
	}{
		{"unknown device", func(c *runtimeapi.ContainerConfig) {
			c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.example/fake=gpu9"}}
		},
			codes.NotFound, []string{`"vendor.example/fake=gpu9"`, v.specDir, "vendor.example/fake=gpu0"}},
		{"unknown device in an annotation", func(c *runtimeapi.ContainerConfig) {
			c.Annotations = map[string]string{"cdi.k8s.io/fake-plugin_dev9": "vendor.example/fake=gpu0,vendor.example/fake=gpu9"}
		}, codes.NotFound, []string{"annotations[cdi.k8s.io/fake-plugin_dev9]", `"vendor.example/fake=gpu9"`}},
		{"not a device name", func(c *runtimeapi.ContainerConfig) { c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "gpu0"}} },
			codes.InvalidArgument, []string{"cdi_devices[0].name", `"gpu0" is not a CDI device name`}},
		{"broken spec", func(c *runtimeapi.ContainerConfig) {
			c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.example/broken=x"}}
		},
			codes.InvalidArgument, []string{`"vendor.example/broken=x"`, filepath.Join(v.specDir, "vendor.example-broken.yaml")}},
	} {
		c := e.ctrConfig("refused", "true")
		tc.tweak(c)
		_, err := e.d.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: c, SandboxConfig: podCfg})
		if status.Code(err) != tc.code {
			t.Errorf("%s: CreateContainer = %v, want %s", tc.name, err, tc.code)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", tc.name, err, w)
			}
		}
	}
	resp, err := e.d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Containers) != 1 || resp.Containers[0].Id != id {
		t.Errorf("pod's containers after the refused creates: %v, want only %s", resp.Containers, id)
	}
	framework.CheckHost(t, before)
	os.Remove(filepath.Join(v.specDir, "vendor.example-broken.yaml"))

	// The spec changes while berth runs: a second device, a new driver
	// version. The next creates see it, asked for by annotation too.
	v.write(t, "v2", "gpu0", "gpu1")
	os.WriteFile(filepath.Join(v.libDir, "libfake.so"), []byte("fake driver v2\n"), 0o644)
	// The refused creates' name is free again.
	c2 := e.ctrConfig("refused", `echo FAKE_GPU=$FAKE_GPU FAKE_DRIVER=$FAKE_DRIVER; test -c /dev/fake1 && echo has-fake1; cat /opt/fake/libfake.so`)
	c2.Annotations = map[string]string{"cdi.k8s.io/fake-plugin_dev1": "vendor.example/fake=gpu1"}
	out2, st := e.output(pod, podCfg, c2)
	if st.ExitCode != 0 || !strings.Contains(out2, "FAKE_GPU=gpu1 FAKE_DRIVER=v2") || !strings.Contains(out2, "has-fake1") || !strings.Contains(out2, "fake driver v2") {
		t.Errorf("after the spec changed: exit %d, output\n%s\nwant gpu1, driver v2 and /dev/fake1", st.ExitCode, out2)
	}
	// The running container keeps what it got.
	if r := e.exec(id, 10, "sh", "-c", "echo $FAKE_DRIVER"); strings.TrimSpace(string(r.Stdout)) != "v1" {
		t.Errorf("running container's FAKE_DRIVER = %q, want v1", r.Stdout)
	}
}

// waitLog returns a container's CRI log once it holds want.
func waitLog(t *testing.T, path, want string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) || time.Now().After(deadline) {
			return string(b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
