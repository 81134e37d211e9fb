package container_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestUserNamespaces: a pod with its own user namespace (mode POD, as the
// kubelet asks for hostUsers: false). Its root is an unprivileged host
// uid; the image's files, the pod's files and volumes still belong to
// root inside (id-mapped), what the container writes lands on the host as
// the mapped uid, and the pod has its own network namespace, owned by its
// user namespace, with an IP.
func TestUserNamespaces(t *testing.T) {
	if !kernelAtLeast(t, 6, 3) {
		// The pods' /dev/shm is a tmpfs, which allows id-mapped mounts
		// from Linux 6.3 on: berth rightly reports no user namespaces
		// before (Debian 12's 6.1, in the VM test bed).
		t.Skip("pods' user namespaces need tmpfs id-mapped mounts: Linux 6.3")
	}
	e := newEnv(t)
	ctx := framework.Ctx(t)
	st, err := e.d.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.RuntimeHandlers {
		if !h.GetFeatures().GetUserNamespaces() {
			t.Fatalf("handler %q: user_namespaces not reported (see the daemon's log for its probe)", h.Name)
		}
	}
	const host, size = 1 << 20, 65536
	mapping := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: host, Length: size}}
	userns := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping}

	// Refused: what berth does not do, and what cannot be.
	for name, mod := range map[string]func(*runtimeapi.PodSandboxConfig){
		"two mappings": func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Uids = append(mapping, &runtimeapi.IDMapping{ContainerId: size, HostId: 2 * host, Length: 1})
		},
		"root not mapped": func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Gids = []*runtimeapi.IDMapping{{ContainerId: 1, HostId: host, Length: size}}
		},
		"mode CONTAINER": func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}
		},
		"host PID": func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_NODE
		},
	} {
		cfg := e.podConfig("userns-bad")
		cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
			UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping}}}
		mod(cfg)
		if _, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg}); status.Code(err) != codes.InvalidArgument ||
			!strings.Contains(err.Error(), "userns_options") {
			t.Errorf("%s: %v, want InvalidArgument naming userns_options", name, err)
		}
	}

	podCfg := e.podConfig("userns")
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: userns}}
	podCfg.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
	pod := e.runPod(podCfg)
	ps, err := e.d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil || ps.Status.GetNetwork().GetIp() == "" {
		t.Fatalf("pod status: %v %v", ps, err)
	}

	// A volume as the kubelet sends it: with the pod's mappings.
	vol := t.TempDir()
	os.Chmod(vol, 0o755)
	os.WriteFile(filepath.Join(vol, "from-host"), []byte("hi"), 0o644)
	cfg := e.ctrConfig("app", "sleep 1000")
	cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = userns
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", HostPath: vol, UidMappings: mapping, GidMappings: mapping}}
	id := e.run(pod, podCfg, cfg)
	check := func(what, script, want string) {
		t.Helper()
		r := e.exec(id, 10, "sh", "-c", script)
		if got := strings.TrimSpace(string(r.Stdout)); r.ExitCode != 0 || got != want {
			t.Errorf("%s: exit %d, %q (stderr %q), want %q", what, r.ExitCode, got, r.Stderr, want)
		}
	}
	check("uid_map", `cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'`, fmt.Sprintf("0 %d %d", host, size))
	check("gid_map", `cat /proc/self/gid_map | tr -s ' ' | sed 's/^ //'`, fmt.Sprintf("0 %d %d", host, size))
	check("identity", `id -u; id -g`, "0\n0")
	check("image files are root's", `stat -c %u:%g / /bin /etc/passwd | sort -u`, "0:0")
	check("pod files are root's", `stat -c %u:%g /etc/hosts /etc/resolv.conf /etc/hostname | sort -u`, "0:0")
	check("rootfs writable", `echo x > /written && mkdir -p /tmp/d && stat -c %u /written`, "0")
	check("volume", `cat /vol/from-host; echo; stat -c %u /vol/from-host; echo y > /vol/from-pod && echo ok`, "hi\n0\nok")
	check("netns owned by the pod: sysctl set by pause", `cat /proc/sys/net/ipv4/ip_unprivileged_port_start`, "0")
	check("network", `grep -c eth0 /proc/net/dev`, "1")

	// On the host: the pod's root is host uid 1<<20; a volume written
	// through the id-mapped mount is the host's root's.
	var stt syscall.Stat_t
	upper := filepath.Join(e.d.Root, "containers", id, "upper", "written")
	if err := syscall.Stat(upper, &stt); err != nil || stt.Uid != host || stt.Gid != host {
		t.Errorf("%s on the host: uid %d gid %d (%v), want %d", upper, stt.Uid, stt.Gid, err, host)
	}
	if err := syscall.Stat(filepath.Join(vol, "from-pod"), &stt); err != nil || stt.Uid != 0 {
		t.Errorf("volume file on the host: uid %d (%v), want 0", stt.Uid, err)
	}
	// Pause holds the pod's user namespace; berth's is the host's.
	info, err := e.d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info.Info["info"], "pid") {
		t.Logf("verbose pod info: %v", info.Info)
	}
	r := e.exec(id, 10, "readlink", "/proc/self/ns/user")
	hostNS, _ := os.Readlink("/proc/self/ns/user")
	if strings.TrimSpace(string(r.Stdout)) == hostNS {
		t.Errorf("the container is in the host's user namespace %s", hostNS)
	}

	// What cannot run in a user namespace is refused.
	bad := e.ctrConfig("priv", "true")
	bad.Linux.SecurityContext.Privileged = true
	if _, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("privileged container in a user namespace: %v", err)
	}
	bad = e.ctrConfig("node-userns", "true")
	bad.Linux.SecurityContext.NamespaceOptions.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}
	if _, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("container asking for the node's user namespace in a pod with its own: %v", err)
	}

	// An image volume in the pod: its files are root's too.
	ivCfg := e.ctrConfig("iv", "sleep 1000")
	ivCfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: e.image}}}
	iv := e.run(pod, podCfg, ivCfg)
	if r := e.exec(iv, 10, "stat", "-c", "%u", "/iv/bin"); strings.TrimSpace(string(r.Stdout)) != "0" {
		t.Errorf("image volume in a user namespace: %q %q", r.Stdout, r.Stderr)
	}

	// Gone with the pod: mounts, netns pin.
	if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], e.d.State+"/") {
			t.Errorf("left mounted after the pod's removal: %s", f[4])
		}
	}
}

// kernelAtLeast tells whether the running kernel is major.minor or later.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release[:], err)
	}
	return ma > major || ma == major && mi >= minor
}

// TestUserNamespacesHostNetwork: a pod in its own user namespace on the
// host's network (KEP-5607, hostNetwork with hostUsers: false). Status
// reports the feature; the container's root is an unprivileged host uid,
// it sees the host's interfaces, and /sys is the host's, read-only (the
// pod's user namespace may not mount a sysfs of its own there).
func TestUserNamespacesHostNetwork(t *testing.T) {
	if !kernelAtLeast(t, 6, 3) {
		t.Skip("pods' user namespaces need tmpfs id-mapped mounts: Linux 6.3")
	}
	e := newEnv(t)
	ctx := framework.Ctx(t)
	st, err := e.d.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetFeatures().GetUserNamespacesHostNetwork() {
		t.Fatalf("features.user_namespaces_host_network not reported: %v", st.GetFeatures())
	}
	const host, size = 1 << 21, 65536
	mapping := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: host, Length: size}}
	userns := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping}
	podCfg := e.podConfig("userns-hostnet")
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE, UsernsOptions: userns}}
	pod := e.runPod(podCfg)
	cfg := e.ctrConfig("app", "sleep 1000")
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = userns
	id := e.run(pod, podCfg, cfg)
	run := func(script string) (string, int32) {
		r := e.exec(id, 10, "sh", "-c", script)
		return strings.TrimSpace(string(r.Stdout)), r.ExitCode
	}
	if got, _ := run(`cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'`); got != fmt.Sprintf("0 %d %d", host, size) {
		t.Errorf("uid_map %q", got)
	}
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	if got, _ := run("readlink /proc/self/ns/net"); got != hostNet {
		t.Errorf("network namespace %s, the host's is %s", got, hostNet)
	}
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries {
		want = append(want, e.Name())
	}
	if got, _ := run("ls /sys/class/net | sort"); got != strings.Join(sortedCopy(want), "\n") {
		t.Errorf("/sys/class/net in the container:\n%s\nthe host's:\n%s", got, strings.Join(want, "\n"))
	}
	if out, code := run("touch /sys/kernel/berth-probe 2>&1; echo; grep ' /sys ' /proc/self/mountinfo"); code != 0 || !strings.Contains(out, "Read-only") || !strings.Contains(out, " ro,") {
		t.Errorf("/sys is not read-only in the container: exit %d, %q", code, out)
	}
	if got, _ := os.Hostname(); got != "" {
		if in, _ := run("hostname"); in != got {
			t.Errorf("hostname %q, the host's is %q", in, got)
		}
	}
}

func sortedCopy(in []string) []string {
	out := append([]string{}, in...)
	sort.Strings(out)
	return out
}
