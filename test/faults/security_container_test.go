package faults_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestSecurityContainerCannotReachBerth: from inside a default container
// (busybox, no privileges asked for) nothing of berth or of another pod
// can be seen or touched: not by path, not through /proc, not with the
// capabilities a container keeps.
func TestSecurityContainerCannotReachBerth(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-sec")
	podA, cfgA := e.RunPod("prober")
	probe := e.Run(podA, cfgA, "probe", "sleep 100000", nil)
	podB, cfgB := e.RunPod("victim")
	secret := "secret-" + framework.RandHex(8)
	victim := e.Run(podB, cfgB, "victim", "echo "+secret+" > /secret; echo "+secret+"; sleep 100000", nil)
	secWaitFile(t, filepath.Join(cfgB.LogDirectory, "victim.log"), secret)

	victimRootfs := secRootfs(t, e.D, victim)
	hostPaths := map[string]string{
		"berth's socket":          e.D.Socket,
		"berth's state dir":       e.D.State,
		"berth's root dir":        e.D.Root,
		"a pod record dir":        filepath.Join(e.D.State, "containers", victim),
		"another pod's rootfs":    filepath.Join(victimRootfs, "secret"),
		"another pod's upper dir": filepath.Join(e.D.Root, "containers", victim, "upper", "secret"),
		"another pod's log dir":   cfgB.LogDirectory,
		"another pod's log":       filepath.Join(cfgB.LogDirectory, "victim.log"),
	}
	x := secExec{t: t, d: e.D, id: probe}
	// The probe can tell a path that exists from one that does not.
	x.ok("its own /etc/hostname", "stat /etc/hostname >/dev/null && cat /etc/hostname")
	for what, p := range hostPaths {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("%s %s is not on the host, the test proves nothing: %v", what, p, err)
		}
		for _, via := range []string{"", "/proc/1/root", "/proc/self/root", "/proc/1/cwd"} {
			x.fails(what+" via "+secOr(via, "its path"), "ls -d "+via+p+" || stat "+via+p+" || cat "+via+p)
		}
	}
	x.empty("sockets anywhere in the container", `find / \( -path /proc -o -path /sys \) -prune -o -type s -print`)
	x.empty("the other pod's secret anywhere", `find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type f -exec grep -l `+secret+` {} + || true`)

	// The other side: a host user who is not root cannot change what
	// berth keeps, image layers and writable layers included, even
	// knowing the paths (a container's id shows in its cgroup path).
	t.Run("host users", func(t *testing.T) {
		x := secExec{t: t, d: e.D, id: probe}
		x.ok("write the container's /tmp", "touch /tmp/copied-up && echo ok")
		for _, dir := range []string{e.D.State, e.D.Root} {
			if found := secOthersReach(dir); len(found) > 0 {
				t.Errorf("host users can write under %s: %v", dir, found)
			}
		}
		// What a container prints may be secret: its log is not for
		// every host user to read (0640, as containerd's).
		if mode, uid, _ := secOwner(t, hostPaths["another pod's log"]); mode.Perm()&0o007 != 0 || uid != 0 {
			t.Errorf("%s is %s uid %d: others may read it", hostPaths["another pod's log"], mode, uid)
		}
	})

	t.Run("pid namespace", func(t *testing.T) {
		x := secExec{t: t, d: e.D, id: probe}
		hostPid, _ := os.Readlink("/proc/self/ns/pid")
		if got := x.ok("pid namespace", "readlink /proc/self/ns/pid"); got == hostPid {
			t.Errorf("the container is in the host's pid namespace %s", got)
		}
		if got := x.ok("pid 1", "tr '\\0' ' ' < /proc/1/cmdline"); !strings.Contains(got, "pause") {
			t.Errorf("pid 1 is %q, want the pod's pause", got)
		}
		// pause comes from berth's monitor: what berth's environment
		// holds (the test's BERTH_* here, a node's proxy credentials
		// elsewhere) must not be read through it.
		if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", e.D.PID)); !strings.Contains(string(env), "BERTH_") {
			t.Fatalf("berth's environment holds no BERTH_ variable: the check below proves nothing")
		}
		if r := x.run("tr '\\0' '\\n' < /proc/1/environ"); strings.Contains(string(r.Stdout), "BERTH_") {
			t.Errorf("berth's environment readable through pause's /proc/1/environ:\n%s", r.Stdout)
		}
		// berth, its monitors and every process of the other pod name
		// the daemon's temp dir or run sleep/pause of another pod: the
		// probe's pod holds pause, its sleep and this shell, no more.
		procs := x.ok("processes", `for p in /proc/[0-9]*; do echo "${p#/proc/}: $(tr '\0' ' ' < $p/cmdline)"; done`)
		t.Logf("processes seen from the container:\n%s", procs)
		if strings.Contains(procs, e.D.Dir) || strings.Contains(procs, secret) {
			t.Errorf("host or other pods' processes are visible:\n%s", procs)
		}
		if n := len(strings.Split(procs, "\n")); n > 6 {
			t.Errorf("%d processes visible, want pause, sleep and the probe's own:\n%s", n, procs)
		}
	})

	// The streaming server listens on the host's loopback only: a pod
	// reaches the host through its gateway, where a server of the
	// test's answers and berth's does not.
	t.Run("streaming server", func(t *testing.T) {
		x := secExec{t: t, d: e.D, id: probe}
		resp, err := e.D.Runtime.Exec(framework.Ctx(t), &runtimeapi.ExecRequest{ContainerId: probe, Cmd: []string{"true"}, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(resp.Url)
		if err != nil || u.Hostname() != "127.0.0.1" {
			t.Fatalf("streaming URL %q (%v): want the loopback default", resp.Url, err)
		}
		// host-local gives the bridge the subnet's first address.
		gw := e.Net.Subnet.IP.To4()
		if gw == nil {
			t.Fatalf("test network %s is not IPv4", e.Net.Subnet)
		}
		gw = net.IPv4(gw[0], gw[1], gw[2], gw[3]+1).To4()
		control := secServeOn(t, net.JoinHostPort(gw.String(), "0"), "control")
		get := func(hostPort, path string) string {
			h, p, _ := net.SplitHostPort(hostPort)
			return fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | nc -w 10 %s %s`, path, h, p)
		}
		if got := x.ok("the test's server on the gateway", get(control, "/")); !strings.HasSuffix(got, "control") {
			t.Fatalf("the test's server on %s answered %q", control, got)
		}
		r := x.run(get(net.JoinHostPort(gw.String(), u.Port()), u.RequestURI()))
		if r.ExitCode == 0 || strings.Contains(string(r.Stdout), "HTTP/") {
			t.Errorf("berth's streaming server (port %s) answered a pod on %s: exit %d %q %q", u.Port(), gw, r.ExitCode, r.Stdout, r.Stderr)
		}
	})

	t.Run("masked and readonly paths", func(t *testing.T) {
		x := secExec{t: t, d: e.D, id: probe}
		mounts := x.ok("mountinfo", "cat /proc/self/mountinfo")
		// Masked files read as empty (/dev/null over them), masked dirs
		// list nothing (an empty read-only tmpfs); on the host they do not.
		masked := map[string]string{
			"/proc/kcore": "wc -c < %s", "/proc/keys": "wc -c < %s", "/proc/timer_list": "wc -c < %s",
			"/proc/sched_debug": "wc -c < %s", "/sys/firmware": "ls -A %s | wc -l", "/proc/acpi": "ls -A %s | wc -l",
			"/proc/scsi": "ls -A %s | wc -l", "/sys/devices/virtual/powercap": "ls -A %s | wc -l",
		}
		for p, count := range masked {
			if _, err := os.Stat(p); err != nil {
				continue // not on this kernel: nothing to mask
			}
			if !secMountedAt(mounts, p) {
				t.Errorf("%s is not masked (no mount over it)", p)
			}
			if got := x.ok("read "+p, fmt.Sprintf(count, p)); got != "0" {
				t.Errorf("%s: %s bytes or entries readable", p, got)
			}
		}
		// Opened for writing, nothing written: a hole here does no harm.
		for _, p := range []string{"/proc/sysrq-trigger", "/proc/sys/kernel/domainname", "/proc/irq/default_smp_affinity", "/sys/kernel/uevent_helper"} {
			if _, err := os.Stat(p); err == nil {
				x.fails("open "+p+" for writing", ": > "+p)
			}
		}
	})

	t.Run("capabilities", func(t *testing.T) {
		x := secExec{t: t, d: e.D, id: probe}
		const capSysAdmin = 21
		for _, set := range []string{"CapEff", "CapBnd"} {
			v := x.ok(set, "grep "+set+": /proc/self/status | cut -f2")
			if secCapBit(t, v, capSysAdmin) {
				t.Errorf("%s %s holds CAP_SYS_ADMIN", set, v)
			}
		}
		x.fails("mount tmpfs", "mkdir -p /mnt/t && mount -t tmpfs none /mnt/t")
		x.fails("remount / read-write", "mount -o remount,rw /")
		x.fails("bind-mount /", "mount --bind / /mnt")
		// CAP_MKNOD is in the default set (as containerd's), so mknod
		// itself works: the device cgroup is what makes the node useless.
		x.fails("read a made /dev/mem", "mknod /tmp/mem c 1 1; head -c 1 /tmp/mem >/dev/null")
		x.fails("read a made disk", "mknod /tmp/disk b 8 0; head -c 1 /tmp/disk >/dev/null")
		x.fails("write a made /dev/kmsg", "mknod /tmp/kmsg c 1 11; : > /tmp/kmsg")
	})

	t.Run("readonly rootfs", func(t *testing.T) {
		ro := e.Run(podA, cfgA, "ro", "sleep 100000", func(c *runtimeapi.ContainerConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true}}
		})
		x := secExec{t: t, d: e.D, id: ro}
		x.ok("read the rootfs", "cat /etc/passwd >/dev/null && echo ok")
		x.fails("write the rootfs", "touch /written")
		x.fails("remount / read-write", "mount -o remount,rw / || touch /written")
		x.fails("write /etc/hosts", "echo 1.2.3.4 evil >> /etc/hosts")
	})
}

// secServeOn serves body over HTTP on addr until the test ends and
// returns the address it listens on.
func secServeOn(t *testing.T, addr, body string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// secRootfs is the container's rootfs mountpoint on the host, from
// its verbose status.
func secRootfs(t *testing.T, d *framework.Daemon, id string) string {
	t.Helper()
	resp, err := d.Runtime.ContainerStatus(framework.Ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Rootfs string `json:"rootfs"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.Rootfs == "" {
		t.Fatalf("container %s verbose info %q: %v", id, resp.Info["info"], err)
	}
	return info.Rootfs
}

// secMountedAt reports whether mountinfo holds a mount point at p.
func secMountedAt(mountinfo, p string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == p {
			return true
		}
	}
	return false
}

func secOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
