package faults_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestSecurityMountSymlinks: symlinks an image plants where berth mounts
// or reads resolve inside the container's rootfs, never on the host; a
// host_path that is itself a symlink is followed on the host, as
// containerd does (the kubelet's or the admin's choice of path), and
// shows only what it points at.
func TestSecurityMountSymlinks(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-secmnt")
	victims := framework.TempDir(t)
	if err := os.WriteFile(filepath.Join(victims, "passwd"), []byte("evil:x:4242:4242::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vol := framework.TempDir(t)
	if err := os.WriteFile(filepath.Join(vol, "in-volume"), []byte("v"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := strings.Repeat("../", 24)
	// busybox, plus links to host paths where the container's mounts go
	// and where berth looks for /etc/passwd.
	ref := fmt.Sprintf("%s/berth-test-hostile/mount-links:%s", framework.TestRegistry(t), framework.RandHex(4))
	secPushImage(t, ref, secRemoteImage(t, e.Image), secTarLayer(t,
		secTarSymlink("escape", e.D.Dir),
		secTarSymlink("climb", up+strings.TrimPrefix(e.D.Dir, "/")),
		secTarSymlink("etc", victims),
	))
	if _, err := e.D.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	watched := []string{victims, e.D.Dir, vol}
	pod, podCfg := e.RunPod("links")
	before := secSnapshotOutsideState(t, e.D, watched...)

	t.Run("image links", func(t *testing.T) {
		ctr := e.Run(pod, podCfg, "links", "sleep 100000", func(c *runtimeapi.ContainerConfig) {
			c.Image.Image = ref
			c.Mounts = []*runtimeapi.Mount{
				{ContainerPath: "/escape/planted", HostPath: vol},
				{ContainerPath: "/climb/planted2", HostPath: vol},
			}
		})
		x := secExec{t: t, d: e.D, id: ctr}
		// The mounts and /etc/hosts land where the links lead inside the
		// rootfs: a directory named like the host path, in the container.
		x.ok("mount through the absolute link", "cat "+e.D.Dir+"/planted/in-volume")
		x.ok("mount through the climbing link", "cat "+e.D.Dir+"/planted2/in-volume")
		x.ok("/etc/hosts through the link", "grep -q links /etc/hosts && ls "+victims+"/hosts")
		for _, m := range hostMountsUnder(t, e.D.Dir, victims) {
			if !strings.HasPrefix(m, e.D.State+"/") {
				t.Errorf("mounted on the host outside the state dir: %s", m)
			}
		}
		secAssertSame(t, before, secSnapshotOutsideState(t, e.D, watched...), "host")
	})

	t.Run("passwd through a link", func(t *testing.T) {
		// berth resolves run_as_username in the image's /etc/passwd; the
		// host's victims/passwd names evil as 4242.
		resp, err := e.D.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod, SandboxConfig: podCfg,
			Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "evil"},
				Image:    &runtimeapi.ImageSpec{Image: ref},
				Command:  []string{"sleep", "100000"},
				Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "evil"}},
			},
		})
		if err != nil {
			t.Logf("refused, as the image has no user evil: %v", err)
			return
		}
		st, err := e.D.Runtime.ContainerStatus(framework.Ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: resp.ContainerId})
		if err != nil {
			t.Fatal(err)
		}
		if uid := st.GetStatus().GetUser().GetLinux().GetUid(); uid == 4242 {
			t.Errorf("run_as_username evil resolved to uid %d from the host's %s/passwd", uid, victims)
		}
	})

	t.Run("host path is a link", func(t *testing.T) {
		link := filepath.Join(vol, "to-state")
		if err := os.Symlink(e.D.State, link); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(link)
		ctr := e.Run(pod, podCfg, "hostlink", "sleep 100000", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/state", HostPath: link, Readonly: true}}
		})
		x := secExec{t: t, d: e.D, id: ctr}
		x.ok("the link's target is mounted", "ls /state/containers >/dev/null && echo ok")
		x.empty("berth's CRI socket", "find / -name "+filepath.Base(e.D.Socket)+" 2>/dev/null; true")
		x.fails("the state mount is read-only", "touch /state/x")
	})
}

// hostMountsUnder lists the host's mount points below any of dirs.
func hostMountsUnder(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, dir := range dirs {
		ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			out = append(out, m.Mountpoint)
		}
	}
	return out
}

// secSnapshotOutsideState is secSnapshot of roots without berth's state
// dir, which every container adds to.
func secSnapshotOutsideState(t *testing.T, d *framework.Daemon, roots ...string) map[string]string {
	t.Helper()
	all := secSnapshot(t, roots...)
	for p := range all {
		if p == d.State || strings.HasPrefix(p, d.State+"/") || strings.HasPrefix(p, d.Root+"/containers") {
			delete(all, p)
		}
	}
	return all
}
