package security_test

import (
	"archive/tar"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestContainerd_CVE_2024_40635_UIDOverflow: containerd parsed an
// image's USER of 2147483648 or more into an int32 that wrapped, and
// ran the container as root. Every uid or gid past int32, from the
// image or from the CRI, must be refused with InvalidArgument or run as
// exactly that id; never as root.
func TestContainerd_CVE_2024_40635_UIDOverflow(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("cve-2024-40635")
	check := func(t *testing.T, c *runtimeapi.ContainerConfig, what string) {
		t.Helper()
		id, err := e.start(pod, podCfg, c)
		if err != nil {
			if grpcCode(err) != codes.InvalidArgument {
				t.Errorf("%s: %v; want InvalidArgument", what, err)
			}
			e.remove(id)
			return
		}
		if ids := e.sh(id, "id -u; id -g"); strings.Contains(ids, "\n0") || strings.HasPrefix(ids, "0") {
			t.Errorf("%s runs as %q", what, ids)
		}
		e.remove(id)
	}
	for _, user := range []string{"2147483648", "4294967296", "4294967295", "2147483648:2147483648", "1000:4294967296", "-1", "-2147483648", "18446744073709551616", "0x80000000"} {
		t.Run("image USER "+user, func(t *testing.T) {
			img := e.push("uid", image(t, e.busybox(), func(c *v1.Config) { c.User = user }))
			e.mustPull(img)
			check(t, e.ctr("uid", img), "USER "+user)
		})
	}
	for _, id := range []int64{1 << 31, 1 << 32, 1<<32 - 1, -1, -(1 << 31)} {
		t.Run(fmt.Sprintf("run_as_user %d", id), func(t *testing.T) {
			c := e.ctr("uid", "")
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: id}}}
			check(t, c, "run_as_user")
			c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: id}, SupplementalGroups: []int64{id}}
			check(t, c, "run_as_group")
		})
	}
}

// passwdImage is busybox with its own /etc/passwd and /etc/group: alice
// (1000, primary group 1000) is a member of club (1234); a file only
// club may read; and another only club may NOT read (0604), the
// "negative" permission supplementary groups exist to enforce.
func (e *env) passwdImage(t *testing.T, user string) string {
	t.Helper()
	return e.push("groups", image(t, e.busybox(), func(c *v1.Config) { c.User = user },
		layer(t,
			file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n"),
			file("etc/group", "root:x:0:\nalice:x:1000:\nclub:x:1234:alice\n"),
			entry{name: "club-only", typ: tar.TypeReg, body: "club\n", mode: 0o040, gid: 1234},
			entry{name: "not-club", typ: tar.TypeReg, body: "others\n", mode: 0o604, gid: 1234},
		)))
}

// TestContainerd_CVE_2023_25173_SupplementaryGroups: containerd (and
// CRI-O, CVE-2022-2995) left out the supplementary groups the image's
// /etc/group gives the user, so a file denied to a group ("negative"
// permissions) was readable. The container's process and every exec
// must carry exactly the groups /etc/group names for the user, plus the
// CRI's supplemental groups; never root's group.
func TestContainerd_CVE_2023_25173_SupplementaryGroups(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("cve-2023-25173")
	for _, user := range []string{"alice", "1000"} {
		t.Run("USER "+user, func(t *testing.T) {
			img := e.passwdImage(t, user)
			e.mustPull(img)
			id := e.mustStart(pod, podCfg, e.ctr("groups", img))
			for what, script := range map[string]string{
				"first process": "grep Groups /proc/$(pgrep -xo sleep)/status | tr -s ' \t' ' '",
				"exec":          "grep Groups /proc/self/status | tr -s ' \t' ' '",
			} {
				if got := strings.TrimSpace(e.sh(id, script)); got != "Groups: 1000 1234" {
					t.Errorf("%s: %q; want 1000 and 1234", what, got)
				}
			}
			if out, _, code := e.exec(id, "cat /not-club"); code == 0 {
				t.Errorf("a member of club read a file denied to club: %q", out)
			}
			if out := e.sh(id, "cat /club-only"); out != "club" {
				t.Errorf("club-only reads %q", out)
			}
			e.remove(id)
		})
	}
	t.Run("supplemental groups", func(t *testing.T) {
		img := e.passwdImage(t, "alice")
		e.mustPull(img)
		c := e.ctr("groups", img)
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{SupplementalGroups: []int64{4321}}}
		id := e.mustStart(pod, podCfg, c)
		if got := strings.TrimSpace(e.sh(id, "grep Groups /proc/self/status | tr -s ' \t' ' '")); got != "Groups: 1000 1234 4321" {
			t.Errorf("%q; want 1000 1234 4321", got)
		}
		c = e.ctr("strict", img)
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict}}
		id = e.mustStart(pod, podCfg, c)
		if got := strings.TrimSpace(e.sh(id, "grep Groups /proc/self/status | tr -s ' \t' ' '")); got != "Groups: 1000" {
			t.Errorf("Strict: %q; want 1000 alone", got)
		}
	})
}

// TestRunc_CVE_2022_29162_InheritableCaps (containerd and moby
// CVE-2022-24769, CRI-O CVE-2022-27652): runtimes gave processes
// inheritable capabilities, which a setcap'd or setuid program then
// raised to effective even for a non-root user. Neither the container's
// process nor an exec may hold an inheritable or ambient capability; a
// non-root user holds none at all.
func TestRunc_CVE_2022_29162_InheritableCaps(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("cve-2022-29162")
	caps := func(id, pid string) map[string]string {
		out := map[string]string{}
		for _, line := range strings.Split(e.sh(id, "grep ^Cap /proc/"+pid+"/status"), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				out[k] = strings.TrimSpace(v)
			}
		}
		return out
	}
	zero := "0000000000000000"
	for _, c := range []struct {
		name string
		sc   *runtimeapi.LinuxContainerSecurityContext
	}{
		{"root", nil},
		{"root with added caps", &runtimeapi.LinuxContainerSecurityContext{Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN", "SYS_PTRACE"}}}},
		{"non-root", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: wrapInt(1000)}},
		{"non-root with added caps", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: wrapInt(1000), Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := e.ctr("caps", "")
			cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: c.sc}
			id := e.mustStart(pod, podCfg, cfg)
			// PID 1 is pause, in the pod's PID namespace: the container's
			// first process is its sleep.
			for what, pid := range map[string]string{"first process": "$(pgrep -xo sleep)", "exec": "self"} {
				got := caps(id, pid)
				if got["CapInh"] != zero || got["CapAmb"] != zero {
					t.Errorf("%s: inheritable %s, ambient %s", what, got["CapInh"], got["CapAmb"])
				}
				if c.sc != nil && c.sc.RunAsUser != nil && (got["CapEff"] != zero || got["CapPrm"] != zero) {
					t.Errorf("%s of a non-root user: effective %s, permitted %s", what, got["CapEff"], got["CapPrm"])
				}
			}
			e.remove(id)
		})
	}
}

func wrapInt(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }

// TestCRIO_CVE_2022_4318_HomeAndPasswd: CRI-O wrote a line for a user
// missing from the image's /etc/passwd, with the HOME the pod gave,
// and a newline in HOME added a user of uid 0. berth writes no
// /etc/passwd; a HOME, a username or a variable carrying newlines must
// leave the image's /etc/passwd and /etc/group as they were, and a
// username that is no name is refused.
func TestCRIO_CVE_2022_4318_HomeAndPasswd(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("cve-2022-4318")
	img := e.passwdImage(t, "")
	e.mustPull(img)
	plain := e.mustStart(pod, podCfg, e.ctr("plain", img))
	passwd, group := e.sh(plain, "cat /etc/passwd"), e.sh(plain, "cat /etc/group")
	inject := "/tmp\nhacker:x:0:0:root:/root:/bin/sh"
	for name, sc := range map[string]*runtimeapi.LinuxContainerSecurityContext{
		"uid without a passwd entry": {RunAsUser: wrapInt(4242)},
		"uid of alice":               {RunAsUser: wrapInt(1000)},
		"root":                       nil,
	} {
		t.Run(name, func(t *testing.T) {
			c := e.ctr("home", img)
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: sc}
			c.Envs = []*runtimeapi.KeyValue{{Key: "HOME", Value: []byte(inject)}, {Key: "USER", Value: []byte("x\nroot::0:0::/:/bin/sh")}}
			id := e.mustStart(pod, podCfg, c)
			if got := e.sh(id, "cat /etc/passwd"); got != passwd {
				t.Errorf("/etc/passwd became:\n%s", got)
			}
			if got := e.sh(id, "cat /etc/group"); got != group {
				t.Errorf("/etc/group became:\n%s", got)
			}
			if ids := e.sh(id, "id -u hacker 2>/dev/null || echo none"); ids != "none" {
				t.Errorf("user hacker exists: %s", ids)
			}
			e.remove(id)
		})
	}
	for _, name := range []string{"alice\nroot", "alice:x:0:0", "root\x00alice", "../../etc/passwd"} {
		t.Run(fmt.Sprintf("run_as_username %q", name), func(t *testing.T) {
			c := e.ctr("username", img)
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: name}}
			id, err := e.start(pod, podCfg, c)
			wantCode(t, err, codes.InvalidArgument)
			e.remove(id)
		})
	}
}

// TestContainerd_CVE_2021_21334_EnvSharing: containerd's CRI shared one
// slice of the image's environment between containers created at the
// same time, so one container's variables (secrets) showed up in
// another's. Containers created concurrently from one image must each
// hold exactly the image's variables and their own.
func TestContainerd_CVE_2021_21334_EnvSharing(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("cve-2021-21334")
	img := e.push("env", image(t, e.busybox(), func(c *v1.Config) {
		// Room to spare in the slice: the aliasing shows only when an
		// append need not copy.
		env := make([]string, 0, 64)
		c.Env = append(env, "A=1", "B=2", "C=3")
	}))
	e.mustPull(img)
	const n = 12
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.ctr(fmt.Sprintf("env-%d", i), img)
			c.Envs = []*runtimeapi.KeyValue{{Key: "SECRET", Value: []byte(fmt.Sprintf("secret-%d", i))}, {Key: fmt.Sprintf("ONLY_%d", i), Value: []byte("x")}}
			id, err := e.start(pod, podCfg, c)
			if err != nil {
				t.Errorf("container %d: %v", i, err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	for i, id := range ids {
		if id == "" {
			continue
		}
		env := e.info(id).RuntimeSpec.Process.Env
		var got []string
		for _, kv := range env {
			if strings.HasPrefix(kv, "SECRET=") || strings.HasPrefix(kv, "ONLY_") {
				got = append(got, kv)
			}
		}
		want := fmt.Sprintf("[SECRET=secret-%d ONLY_%d=x]", i, i)
		if fmt.Sprint(got) != want {
			t.Errorf("container %d's variables %v; want %s", i, got, want)
		}
	}
}

// TestContainerd_CVE_2026_47262_PasswdBombs: containerd parsed an
// image's /etc/group without bound when creating a container, and an
// image could exhaust its memory. berth reads the image's /etc/passwd
// and /etc/group to resolve the user: huge ones, a character device
// that never ends, a FIFO that never answers, must each give a clear
// error (or work) at once, with berth's memory bounded.
func TestContainerd_CVE_2026_47262_PasswdBombs(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("cve-2026-47262")
	big := "club:x:1234:" + strings.Repeat("alice,", 8<<20) + "alice\n"
	for _, c := range []struct {
		name    string
		entries []entry
	}{
		{"huge group", []entry{file("etc/group", big)}},
		{"huge passwd", []entry{file("etc/passwd", "alice:x:1000:1000::/:/bin/sh\n"+strings.Repeat("#"+strings.Repeat("x", 1022)+"\n", 48<<10))}},
		{"group is /dev/zero", []entry{{name: "etc/group", typ: tar.TypeChar, mode: 0o644}}},
		{"group is a fifo", []entry{{name: "etc/group", typ: tar.TypeFifo, mode: 0o644}}},
		{"passwd is /dev/zero", []entry{{name: "etc/passwd", typ: tar.TypeChar, mode: 0o644}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			entries := c.entries
			for i := range entries {
				if entries[i].typ == tar.TypeChar {
					entries[i].devmajor, entries[i].devminor = 1, 5
				}
			}
			img := e.push("passwd-bomb", image(t, e.busybox(), func(cfg *v1.Config) { cfg.User = "alice" }, layer(t, entries...)))
			e.mustPull(img)
			var err error
			var id string
			start := time.Now()
			growth := peakGrowth(t, []int{e.D.PID}, func() { id, err = e.start(pod, podCfg, e.ctr("bomb", img)) })
			t.Logf("%v after %s, peak RSS growth %d MiB", err, time.Since(start).Round(time.Millisecond), growth[e.D.PID])
			if g := growth[e.D.PID]; g > 64 {
				t.Errorf("berth's peak RSS grew %d MiB", g)
			}
			if time.Since(start) > 20*time.Second {
				t.Errorf("CreateContainer took %s", time.Since(start))
			}
			if err != nil && !strings.Contains(err.Error(), "/etc/") {
				t.Errorf("the error does not name the file: %v", err)
			}
			e.remove(id)
		})
	}
	if _, err := e.D.Runtime.Version(t.Context(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("berth after the bombs: %v", err)
	}
}

// TestContainerd_CVE_2026_53488_ImageLabels: containerd's CRI copied an
// image config's labels onto the container, where a plugin acting on
// container labels ran a command on the host. berth's container spec
// carries no label of the image: not libcontainer's own annotations, not
// berth's, which a hostile image could try to spoof.
func TestContainerd_CVE_2026_53488_ImageLabels(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("cve-2026-53488")
	hostile := map[string]string{
		"org.systemd.property.ExecStopPost": `[("/bin/sh", ["/bin/sh", "-c", "touch /tmp/pwn"], false)]`,
		"org.criu.config":                   "/etc/shadow",
		"io.kubernetes.cri.sandbox-id":      "spoofed",
		"io.kubernetes.cri.container-type":  "sandbox",
		"cdi.k8s.io/hostile":                "vendor.com/device=all",
	}
	img := e.push("labels", image(t, e.busybox(), func(c *v1.Config) { c.Labels = hostile }))
	e.mustPull(img)
	id := e.mustStart(pod, podCfg, e.ctr("labelled", img))
	ann := e.info(id).RuntimeSpec.Annotations
	for k, v := range hostile {
		if ann[k] == v {
			t.Errorf("the image's label %s=%q reached the container's spec", k, v)
		}
	}
	st, err := e.D.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	for k := range hostile {
		if _, ok := st.Status.Labels[k]; ok {
			t.Errorf("the image's label %s is a label of the container", k)
		}
	}
}
