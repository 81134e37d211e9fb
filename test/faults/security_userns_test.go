package faults_test

import (
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestSecurityUserNamespaceContainerDir: a container in its own user
// namespace must reach its rootfs by path as an unprivileged host uid,
// so its state dir cannot be root's only; it is searchable by that
// uid's group alone (0710), not by every host user, and the container
// still runs and writes.
func TestSecurityUserNamespaceContainerDir(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-secuserns")
	st, err := e.D.Runtime.Status(framework.Ctx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.RuntimeHandlers) == 0 || !st.RuntimeHandlers[0].GetFeatures().GetUserNamespaces() {
		t.Skip("berth reports no user namespace support on this machine")
	}
	const hostID = 1 << 20
	mapping := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: hostID, Length: 65536}}
	userns := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping}
	pod, cfg := e.RunPodWith("userns", func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: userns},
		}
	})
	ctr := e.Run(pod, cfg, "app", "sleep 100000", func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: userns},
		}}
	})
	x := secExec{t: t, d: e.D, id: ctr}
	x.ok("write the container's /tmp", "touch /tmp/copied-up && echo ok")

	dir := filepath.Join(e.D.State, "containers", ctr)
	mode, uid, gid := secOwner(t, dir)
	if mode.Perm() != 0o710 || uid != 0 || gid != hostID {
		t.Errorf("%s: %s uid %d gid %d, want 0710 root's, group %d (the pod's root)", dir, mode.Perm(), uid, gid, hostID)
	}
	for _, d := range []string{e.D.State, e.D.Root} {
		if found := secOthersReach(d); len(found) > 0 {
			t.Errorf("host users can write under %s: %v", d, found)
		}
	}
}
