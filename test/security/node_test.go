package security_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/admin"
	"github.com/berth-runtime/berth/test/framework"
)

// TestCRIO_CVE_2022_0811_SysctlInjection: CRI-O passed a pod's sysctls
// to a helper that split them on "+", so one namespaced sysctl's value
// set kernel.core_pattern on the host (cr8escape). berth's pause writes
// the sysctls from inside the pod's namespaces; each hostile shape must
// be refused with InvalidArgument naming the sysctl, leave no pod, and
// leave the host's sysctls as they were.
func TestCRIO_CVE_2022_0811_SysctlInjection(t *testing.T) {
	e := newEnv(t)
	watched := []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/shm_rmid_forced", "/proc/sys/net/ipv4/ip_forward"}
	before := map[string]string{}
	for _, p := range watched {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = string(b)
	}
	host := framework.SnapshotHost(t, e.Scope())
	// kernel: berth hands the pair to the kernel, which refuses the
	// value (any error naming the sysctl will do: the name was fine).
	cases := []struct {
		name, key, value string
		hostNet, kernel  bool
	}{
		{"not namespaced", "kernel.core_pattern", "|/tmp/pwn", false, false},
		{"plus injection", "kernel.shm_rmid_forced", "1+kernel.core_pattern=|/tmp/pwn", false, true},
		{"plus injection in a net sysctl", "net.ipv4.ip_unprivileged_port_start", "0+kernel.core_pattern=|/tmp/pwn", false, true},
		{"newline injection", "kernel.shm_rmid_forced", "1\nkernel.core_pattern=|/tmp/pwn", false, false},
		{"equals in the name", "kernel.shm_rmid_forced=1 kernel.core_pattern", "|/tmp/pwn", false, false},
		{"slashes climbing", "net/../kernel/core_pattern", "|/tmp/pwn", false, false},
		{"dots climbing", "net.ipv4.conf.all.forwarding/../../../../kernel/core_pattern", "|/tmp/pwn", false, false},
		{"ipc prefix then climb", "kernel.shmmax/../modprobe", "/tmp/pwn", false, false},
		{"prefix look-alike", "kernel.shm_rmid_forced_not", "1", false, true},
		{"modprobe", "kernel.modprobe", "/tmp/pwn", false, false},
		{"net sysctl on the host network", "net.ipv4.ip_forward", "0", true, false},
		{"nul in the name", "kernel.shm_rmid_forced\x00kernel.core_pattern", "|/tmp/pwn", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := &runtimeapi.PodSandboxConfig{
				Metadata:     &runtimeapi.PodSandboxMetadata{Name: "sysctl", Namespace: "security", Uid: framework.RandHex(6)},
				LogDirectory: t.TempDir(),
				Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.Parent, Sysctls: map[string]string{c.key: c.value},
					SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{}}},
			}
			if c.hostNet {
				cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
			}
			_, err := e.D.Runtime.RunPodSandbox(framework.Ctx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if c.kernel {
				if err == nil || !strings.Contains(err.Error(), strings.ReplaceAll(c.key, ".", "/")) {
					t.Errorf("got %v; want an error naming %s", err, c.key)
				}
			} else {
				wantCode(t, err, codes.InvalidArgument, "sysctl")
			}
			if pods, _ := e.D.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{}); len(pods.GetItems()) > 0 {
				t.Errorf("a refused pod is listed: %v", pods.Items)
				e.D.RemoveAllPods()
			}
		})
	}
	// What the kubelet sends for a pod's safe sysctls still runs.
	ok, _ := e.RunPodWith("safe-sysctls", func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.Sysctls = map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.ip_unprivileged_port_start": "1000", "net/ipv4/conf/all/accept_redirects": "0"}
	})
	e.D.Runtime.StopPodSandbox(framework.Ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: ok})
	e.D.Runtime.RemovePodSandbox(framework.Ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: ok})
	for _, p := range watched {
		if b, _ := os.ReadFile(p); string(b) != before[p] {
			t.Errorf("host %s is %q, was %q", p, b, before[p])
		}
	}
	framework.CheckHost(t, host)
}

// TestCRIO_CVE_2024_3154_AnnotationsReachTheHost: CRI-O turned a pod's
// annotations into properties of the pod's systemd unit on the host.
// libcontainer does the same with every OCI spec annotation named
// org.systemd.property.* (under the systemd cgroup driver), and reads
// org.criu.config as a host path: a CRI caller's annotations must not
// reach the spec under those names. Pod annotations, which every pod
// author writes, must reach no container's spec at all.
func TestCRIO_CVE_2024_3154_AnnotationsReachTheHost(t *testing.T) {
	e := newEnv(t)
	hostile := map[string]string{
		"org.systemd.property.ExecStopPost":       `[("/bin/sh", ["/bin/sh", "-c", "touch /tmp/pwn"], false)]`,
		"org.systemd.property.DeviceAllow":        `[("/dev/sda", "rwm")]`,
		"org.systemd.property.CPUQuotaPerSecUSec": "uint64 1",
		"org.criu.config":                         "/etc/shadow",
	}
	pod, podCfg := e.RunPodWith("cve-2024-3154", func(c *runtimeapi.PodSandboxConfig) { c.Annotations = hostile })
	for k, v := range hostile {
		t.Run(k, func(t *testing.T) {
			c := e.ctr("annotated", "")
			c.Annotations = map[string]string{k: v}
			id, err := e.start(pod, podCfg, c)
			wantCode(t, err, codes.InvalidArgument, k)
			if id != "" {
				t.Errorf("spec annotations %v", e.info(id).RuntimeSpec.Annotations)
				e.remove(id)
			}
		})
	}
	id := e.mustStart(pod, podCfg, e.ctr("plain", ""))
	for k := range e.info(id).RuntimeSpec.Annotations {
		if _, bad := hostile[k]; bad {
			t.Errorf("the pod's annotation %q reached the container's spec", k)
		}
	}
}

// TestContainerd_CVE_2020_15257_AbstractSockets: containerd-shim
// listened on abstract unix sockets, which live in the network
// namespace, so a hostNetwork container could connect and drive the
// shim as root. berth's daemon, pod processes and pause must hold no
// abstract socket at all; and berth's endpoints on the host's loopback
// (the streaming server) must give a hostNetwork container nothing
// without a token the kubelet was handed.
func TestContainerd_CVE_2020_15257_AbstractSockets(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPodWith("cve-2020-15257", func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
	})
	hostNet := func(name string) *runtimeapi.ContainerConfig {
		c := e.ctr(name, "")
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}}
		return c
	}
	id := e.mustStart(pod, podCfg, hostNet("prober"))
	// A second pod on the pod network: its pod process and pause too.
	other, otherCfg := e.RunPod("other")
	e.mustStart(other, otherCfg, e.ctr("other", ""))
	ex, err := e.D.Runtime.Exec(framework.Ctx(t), &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}

	pids := append([]int{e.D.PID}, framework.ProcessesUnder(e.D.Dir)...)
	found := 0
	for _, pid := range pids {
		inodes := socketInodes(pid)
		found += len(inodes)
		for _, s := range unixSockets(t, pid) {
			if inodes[s.inode] && strings.HasPrefix(s.path, "@") {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				t.Errorf("pid %d (%q) holds the abstract socket %s", pid, b, s.path)
			}
		}
	}
	if found == 0 {
		t.Fatalf("no socket found in %d processes of berth: the test proved nothing", len(pids))
	}
	// From the host network, inside the container.
	u, err := url.Parse(ex.Url)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/exec/" + framework.RandHex(8), "/attach/" + framework.RandHex(8), "/portforward/" + framework.RandHex(8), "/exec/"} {
		out, _, code := e.exec(id, fmt.Sprintf("wget -q -T 5 -O - http://%s%s 2>&1", u.Host, path))
		if code == 0 {
			t.Errorf("the streaming server answered %s to a hostNetwork container: %q", path, out)
		}
	}
}

type unixSocket struct{ inode, path string }

// unixSockets lists the unix sockets of pid's network namespace.
func unixSockets(t *testing.T, pid int) []unixSocket {
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []unixSocket
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) >= 8 {
			out = append(out, unixSocket{inode: fl[6], path: fl[7]})
		}
	}
	return out
}

// socketInodes is the set of socket inodes pid holds.
func socketInodes(pid int) map[string]bool {
	out := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			out[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return out
}

// TestContainerd_CVE_2021_41103_StateDirPermissions: containerd's bundle
// and snapshot dirs let any host user traverse to a container's rootfs
// and run the setuid binaries in it as root. berth keeps rootfs mounts,
// layers and writable layers under its root and state dirs: an
// unprivileged host user must reach none of the image's setuid binary's
// copies, and connect to none of berth's sockets (CRI, admin, pod
// processes).
func TestContainerd_CVE_2021_41103_StateDirPermissions(t *testing.T) {
	e := newEnv(t)
	img := e.reg + "/e2e-test-images/nonewprivs:1.3"
	e.mustPull(img)
	pod, podCfg := e.RunPod("cve-2021-41103")
	e.mustStart(pod, podCfg, e.ctr("setuid", img, "sleep", "100000"))

	var binaries, sockets []string
	filepath.WalkDir(e.D.Dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		switch {
		case de.Name() == "nnp" && de.Type().IsRegular():
			binaries = append(binaries, p)
		case de.Type()&fs.ModeSocket != 0:
			sockets = append(sockets, p)
		}
		return nil
	})
	sockets = append(sockets, admin.SocketPath(e.D.Socket))
	if len(binaries) < 2 || len(sockets) < 3 {
		t.Fatalf("found setuid copies %v and sockets %v: too few, the test proves nothing", binaries, sockets)
	}
	for _, who := range []struct{ uid, gid uint32 }{{65534, 65534}, {1000, 1000}} {
		if r := asUser(t, who.uid, who.gid, "reach", binaries...); len(r) > 0 {
			t.Errorf("host user %d reaches the image's setuid binary:\n\t%s", who.uid, strings.Join(r, "\n\t"))
		}
		if r := asUser(t, who.uid, who.gid, "connect", sockets...); len(r) > 0 {
			t.Errorf("host user %d connects to berth's sockets:\n\t%s", who.uid, strings.Join(r, "\n\t"))
		}
	}
}
