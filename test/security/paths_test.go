package security_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestCRIO_CVE_2024_5154_EtcSymlinkInImage: CRI-O set up a container's
// /etc (an mtab symlink) by a path it joined without resolving the
// image's symlinks, so an image whose /etc pointed out made it create a
// link on the host. berth writes nothing into a rootfs itself, and the
// pod's files (hostname, hosts, resolv.conf) are mounted by
// libcontainer: images whose /etc, /run, /tmp or /dev/shm point at a
// host directory, absolutely or by climbing, must leave it unchanged.
func TestCRIO_CVE_2024_5154_EtcSymlinkInImage(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	pod, podCfg := e.RunPodWith("cve-2024-5154", func(c *runtimeapi.PodSandboxConfig) {
		c.DnsConfig = &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"security.svc"}}
	})
	for _, c := range []struct{ name, target string }{
		{"etc", victim.Dir}, {"etc", up + rel(victim.Dir)}, {"run", victim.Dir}, {"tmp", victim.Dir}, {"dev", victim.Dir},
	} {
		t.Run(c.name+" to "+c.target, func(t *testing.T) {
			// busybox's own /etc and /tmp are removed by a whiteout first.
			img := e.push("etc-symlink", image(t, e.busybox(), nil, layer(t, file(".wh."+c.name, ""), symlink(c.name, c.target))))
			e.mustPull(img)
			cfg := e.ctr("etc", img, "/bin/sleep", "100000")
			cfg.Mounts = []*runtimeapi.Mount{bind(framework.TempDir(t), "/tmp/vol"), bind(framework.TempDir(t), "/run/secrets/token")}
			e.attempt(t, pod, podCfg, cfg, victim, func(id string) {
				e.cantSee(t, id, "the victim", "cat /etc/victim /run/victim /tmp/victim "+victim.Dir+"/victim")
			})
		})
	}
}

// TestCRIO_CVE_2025_0750_MetadataPaths: CRI-O built host paths for a
// pod's logs from the pod's name and namespace, so a "../" in them let
// whoever could create and delete pods unmount any host path. Pod names,
// namespaces and uids and container names with "..", "/" and NULs must be
// refused or stay data: nothing outside berth's dirs may be made,
// mounted, unmounted or removed, and every pod goes cleanly.
func TestCRIO_CVE_2025_0750_MetadataPaths(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	host := framework.SnapshotHost(t, e.Scope())
	climb := up + rel(victim.Dir)
	mounts := hostMountsUnder(t, victim.Dir)
	// The pod network's gateway, .1: host-local hands out .2 and up,
	// unless a CNI argument asks for an address.
	gw := e.Net.Subnet.IP.To4()
	asked := fmt.Sprintf("%d.%d.%d.%d", gw[0], gw[1], gw[2], gw[3]+1)
	for _, c := range []struct {
		md      *runtimeapi.PodSandboxMetadata
		refused bool
	}{
		{&runtimeapi.PodSandboxMetadata{Name: climb, Namespace: "security", Uid: "u1"}, false},
		{&runtimeapi.PodSandboxMetadata{Name: "p", Namespace: climb, Uid: "u2"}, false},
		{&runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "security", Uid: climb}, false},
		{&runtimeapi.PodSandboxMetadata{Name: "..", Namespace: "..", Uid: ".."}, false},
		{&runtimeapi.PodSandboxMetadata{Name: "p/../../x", Namespace: "a/b", Uid: "u3"}, false},
		// A NUL fails every CNI call, DEL included: the pod could
		// never go.
		{&runtimeapi.PodSandboxMetadata{Name: "p\x00x", Namespace: "security", Uid: "u4"}, true},
		// CNI_ARGS are "K=V;K=V": host-local takes IP= as the address
		// to give, here the gateway's.
		{&runtimeapi.PodSandboxMetadata{Name: "p;IP=" + asked, Namespace: "security", Uid: "u5"}, true},
		{&runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "security;IP=" + asked, Uid: "u6"}, true},
	} {
		md := c.md
		t.Run(md.Name+"_"+md.Namespace+"_"+md.Uid, func(t *testing.T) {
			cfg := &runtimeapi.PodSandboxConfig{Metadata: md, LogDirectory: t.TempDir(), Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.Parent}}
			resp, err := e.D.Runtime.RunPodSandbox(framework.Ctx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if c.refused {
				wantCode(t, err, codes.InvalidArgument, "metadata")
				if err == nil {
					if st, err := e.D.Runtime.PodSandboxStatus(framework.Ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId}); err == nil {
						t.Logf("the pod got %s", st.GetStatus().GetNetwork().GetIp())
					}
				}
			}
			if err != nil {
				t.Logf("refused: %v", err)
				return
			}
			for _, name := range []string{climb, "..", "a/../../b", "c\x00d"} {
				c := e.ctr(name, "")
				c.LogPath = "c.log"
				id, err := e.start(resp.PodSandboxId, cfg, c)
				if err != nil {
					t.Logf("container %q refused: %v", name, err)
				}
				e.remove(id)
			}
			if _, err := e.D.Runtime.StopPodSandbox(framework.Ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
				t.Errorf("stop: %v", err)
			}
			if _, err := e.D.Runtime.RemovePodSandbox(framework.Ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
				t.Errorf("remove: %v", err)
			}
			victim.check(t)
		})
	}
	if after := hostMountsUnder(t, victim.Dir); len(after) != len(mounts) {
		t.Errorf("mounts under the victim: %v", after)
	}
	framework.CheckHost(t, host)
}
