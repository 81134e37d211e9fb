package security_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// hostMountsUnder lists the host's mount points at or below dir.
func hostMountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out
}

// up climbs from any depth to /.
var up = strings.Repeat("../", 24)

// rel is p without its leading slash, to append to up.
func rel(p string) string { return strings.TrimPrefix(p, "/") }

// hostDir makes a host directory holding files (name: content) and
// symlinks (name: "-> target").
func hostDir(t *testing.T, entries map[string]string) string {
	t.Helper()
	d := framework.TempDir(t)
	for name, v := range entries {
		p := filepath.Join(d, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		var err error
		if target, ok := strings.CutPrefix(v, "-> "); ok {
			err = os.Symlink(target, p)
		} else if v == "/" {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func bind(hostPath, containerPath string) *runtimeapi.Mount {
	return &runtimeapi.Mount{HostPath: hostPath, ContainerPath: containerPath}
}

// attempt starts c and, if it runs, hands it to check; either way the
// container is removed and the host's victim and mounts must be as they
// were.
func (e *env) attempt(t *testing.T, pod string, podCfg *runtimeapi.PodSandboxConfig, c *runtimeapi.ContainerConfig, victim *victimDir, check func(id string)) {
	t.Helper()
	mounts := hostMountsUnder(t, victim.Dir)
	id, err := e.start(pod, podCfg, c)
	if err != nil {
		t.Logf("refused: %v", err)
	} else if check != nil {
		check(id)
	}
	e.remove(id)
	victim.check(t)
	if after := hostMountsUnder(t, victim.Dir); fmt.Sprint(after) != fmt.Sprint(mounts) {
		t.Errorf("host mounts under %s: %v, before %v", victim.Dir, after, mounts)
	}
}

// cantSee fails if a script run in the container prints the victim's
// content.
func (e *env) cantSee(t *testing.T, id, what, script string) {
	t.Helper()
	out, errOut, _ := e.exec(id, script+" 2>&1")
	if strings.Contains(out+errOut, "victim\n") {
		t.Errorf("%s: the container reads the host's victim: %q", what, out)
	}
}

// TestRunc_CVE_2021_30465_MountTargetSymlinks: runc resolved a mount's
// target after a container sharing the volume had swapped one of its
// components for a symlink, and mounted outside the rootfs. The race is
// reduced to the property runc's fix established: every mount target is
// resolved inside the container's rootfs, whatever symlinks (absolute,
// climbing, chained) a volume or the image holds on the way, so nothing
// is mounted over a host path and no host file shows in the container.
func TestRunc_CVE_2021_30465_MountTargetSymlinks(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	vol := hostDir(t, map[string]string{
		"abs": "-> " + victim.Dir, "climb": "-> " + up + rel(victim.Dir), "chain": "-> abs",
		"dir": "/", "dir/back": "-> ../../../../../..",
	})
	other := hostDir(t, map[string]string{"w-marker": "w\n"})
	img := e.push("mount-symlinks", image(t, e.busybox(), nil, layer(t, symlink("imgabs", victim.Dir), symlink("imgclimb", up+rel(victim.Dir)))))
	e.mustPull(img)
	pod, podCfg := e.RunPod("cve-2021-30465")
	for _, target := range []string{"/vol/abs", "/vol/climb", "/vol/chain/sub", "/vol/dir/back" + victim.Dir, "/imgabs", "/imgclimb/sub"} {
		t.Run(target, func(t *testing.T) {
			c := e.ctr("mnt", img)
			c.Mounts = []*runtimeapi.Mount{bind(vol, "/vol"), bind(other, target)}
			e.attempt(t, pod, podCfg, c, victim, func(id string) {
				e.cantSee(t, id, "by the victim's path", "cat "+victim.Dir+"/victim")
				e.cantSee(t, id, "through the mount", "cat "+target+"/victim")
				if out := e.sh(id, "find / -xdev -name w-marker 2>/dev/null | head -1; cat /proc/self/mountinfo | grep -c w-marker || true"); out == "" {
					t.Logf("the mount shows nowhere")
				}
			})
		})
	}
}

// TestRunc_CVE_2024_45310_NoHostFilesCreated: runc created the missing
// target of a mount (an empty file or directory) through a symlink an
// attacker raced into place, on the host. Reduced the same way: targets
// and working dirs that do not exist, behind symlinks of the image that
// point at a host directory, must be created inside the rootfs or
// refused; nothing may appear on the host.
func TestRunc_CVE_2024_45310_NoHostFilesCreated(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	srcDir := hostDir(t, map[string]string{"d": "/", "f": "file\n"})
	img := e.push("create-through-links", image(t, e.busybox(), nil,
		layer(t, symlink("abs", victim.Dir), symlink("climb", up+rel(victim.Dir)), dir("d"), symlink("d/rel", "../abs"))))
	e.mustPull(img)
	pod, podCfg := e.RunPod("cve-2024-45310")
	cases := map[string]func(c *runtimeapi.ContainerConfig){
		"dir through absolute":  func(c *runtimeapi.ContainerConfig) { c.Mounts = []*runtimeapi.Mount{bind(srcDir+"/d", "/abs/newdir")} },
		"file through absolute": func(c *runtimeapi.ContainerConfig) { c.Mounts = []*runtimeapi.Mount{bind(srcDir+"/f", "/abs/newfile")} },
		"dir through climbing": func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{bind(srcDir+"/d", "/climb/a/b/newdir")}
		},
		"file through a chain": func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{bind(srcDir+"/f", "/d/rel/newfile")}
		},
		"working dir":          func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/abs/newcwd" },
		"working dir climbing": func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/climb/newcwd" },
	}
	for name, tweak := range cases {
		t.Run(name, func(t *testing.T) {
			c := e.ctr("create", img)
			tweak(c)
			e.attempt(t, pod, podCfg, c, victim, nil)
		})
	}
	// berth's own file on the host: the container's log, which the pod
	// process creates as root at log_directory/log_path.
	t.Run("log path", func(t *testing.T) {
		for _, lp := range []string{up + rel(victim.Dir) + "/newlog", "a/../../" + up + rel(victim.Dir) + "/newlog"} {
			c := e.ctr("log", img)
			c.LogPath = lp
			id, err := e.start(pod, podCfg, c)
			wantCode(t, err, codes.InvalidArgument, "log_path")
			e.remove(id)
		}
		victim.check(t)
	})
}

// TestRunc_CVE_2025_31133_MaskedPaths: runc masked /proc files by
// bind-mounting the container's /dev/null over them; a container that
// had swapped /dev/null for a symlink got a /proc file (core_pattern)
// bound writable instead. A volume over /dev holding a null symlink
// tries the same here; and the CRI's own masked and read-only paths,
// aimed with .. and symlinks, must stay inside the container. Either
// way no masked file may read as anything but empty, /proc/sys stays
// read-only, and the host's core_pattern stays.
func TestRunc_CVE_2025_31133_MaskedPaths(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	corePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	devVol := hostDir(t, map[string]string{"null": "-> /proc/sys/kernel/core_pattern", "zero": "-> /proc/sys/kernel/core_pattern"})
	pod, podCfg := e.RunPod("cve-2025-31133")
	masked := []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/sys/firmware"}
	sc := func(c *runtimeapi.ContainerConfig) *runtimeapi.LinuxContainerSecurityContext {
		if c.Linux == nil {
			c.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		if c.Linux.SecurityContext == nil {
			c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{MaskedPaths: masked, ReadonlyPaths: []string{"/proc/sys", "/proc/sysrq-trigger"}}
		}
		return c.Linux.SecurityContext
	}
	cases := map[string]func(c *runtimeapi.ContainerConfig){
		"null symlink in a volume over /dev": func(c *runtimeapi.ContainerConfig) {
			sc(c)
			c.Mounts = []*runtimeapi.Mount{bind(devVol, "/dev")}
		},
		"masked path climbing": func(c *runtimeapi.ContainerConfig) {
			sc(c).MaskedPaths = append(masked, "/proc/../../../../"+rel(victim.Dir)+"/victim")
		},
		"read-only path climbing": func(c *runtimeapi.ContainerConfig) {
			sc(c).ReadonlyPaths = []string{"/proc/sys", "/../../../../" + rel(victim.Dir)}
		},
		"default": func(c *runtimeapi.ContainerConfig) { sc(c) },
	}
	for name, tweak := range cases {
		t.Run(name, func(t *testing.T) {
			c := e.ctr("masked", "")
			tweak(c)
			e.attempt(t, pod, podCfg, c, victim, func(id string) {
				for _, p := range masked[:4] {
					if out, _, code := e.exec(id, "head -c 64 "+p+" | wc -c"); code == 0 && strings.TrimSpace(out) != "0" {
						t.Errorf("masked %s reads %s bytes", p, strings.TrimSpace(out))
					}
				}
				if _, _, code := e.exec(id, "echo '|/tmp/pwn' > /proc/sys/kernel/core_pattern"); code == 0 {
					t.Errorf("the container wrote /proc/sys/kernel/core_pattern")
				}
			})
			if b, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(b) != string(corePattern) {
				t.Fatalf("host core_pattern is %q, was %q", b, corePattern)
			}
		})
	}
}

// TestRunc_CVE_2025_52565_DevConsole: runc bind-mounted the terminal
// over /dev/console, following a symlink a container had raced there,
// onto a /proc file. A tty container with a volume over /dev whose
// console is such a symlink must not get a /proc file writable, nor
// change the host.
func TestRunc_CVE_2025_52565_DevConsole(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	corePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	devVol := hostDir(t, map[string]string{"console": "-> /proc/sys/kernel/core_pattern", "pts": "/"})
	hostConsole := hostDir(t, map[string]string{"console": "-> " + victim.Dir + "/victim"})
	pod, podCfg := e.RunPod("cve-2025-52565")
	for name, mounts := range map[string][]*runtimeapi.Mount{
		"plain":                          nil,
		"console symlink to /proc":       {bind(devVol, "/dev")},
		"console symlink to a host file": {bind(hostConsole, "/dev")},
	} {
		t.Run(name, func(t *testing.T) {
			c := e.ctr("console", "")
			c.Tty, c.Stdin = true, true
			c.Mounts = mounts
			e.attempt(t, pod, podCfg, c, victim, func(id string) {
				if _, _, code := e.exec(id, "echo '|/tmp/pwn' > /proc/sys/kernel/core_pattern"); code == 0 {
					t.Errorf("the container wrote /proc/sys/kernel/core_pattern")
				}
				e.cantSee(t, id, "/dev/console", "cat /dev/console & sleep 0.2; kill $! 2>/dev/null")
			})
			if b, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(b) != string(corePattern) {
				t.Fatalf("host core_pattern is %q, was %q", b, corePattern)
			}
		})
	}
}

// TestRunc_CVE_2025_52881_RedirectedProcWrites: runc's writes to /proc
// (sysctls, LSM labels) went through paths a container could cover with
// a mount of its own, so they landed elsewhere. Volumes over /proc,
// /proc/sys and /sys with files of the right names, on a pod whose
// sysctls libcontainer writes: each must be refused or leave the files
// under them untouched (the writes went to the real procfs).
func TestRunc_CVE_2025_52881_RedirectedProcWrites(t *testing.T) {
	e := newEnv(t)
	fakeProc := hostDir(t, map[string]string{
		"sys/net/ipv4/ip_unprivileged_port_start": "victim\n", "sys/kernel/shm_rmid_forced": "victim\n",
		"self/attr/exec": "victim\n", "self/attr/apparmor/exec": "victim\n", "thread-self/attr/exec": "victim\n",
	})
	// libcontainer may create mountpoints in the volume (it is the
	// container's to write); the files' contents are what a redirected
	// write would change.
	files := map[string]string{}
	filepath.WalkDir(fakeProc, func(p string, de fs.DirEntry, err error) error {
		if err == nil && de.Type().IsRegular() {
			files[p] = "victim\n"
		}
		return nil
	})
	victim := newVictim(t)
	pod, podCfg := e.RunPodWith("cve-2025-52881", func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "1000", "kernel.shm_rmid_forced": "1"}
	})
	for _, target := range []string{"/proc", "/proc/sys", "/proc/self", "/proc/self/attr", "/proc/thread-self", "/sys", "/sys/fs/cgroup", "/proc/1"} {
		t.Run(target, func(t *testing.T) {
			src := fakeProc
			if strings.HasPrefix(target, "/proc/") {
				src = filepath.Join(fakeProc, strings.TrimPrefix(target, "/proc/"))
				if _, err := os.Stat(src); err != nil {
					src = fakeProc
				}
			}
			c := e.ctr("procwrite", "")
			c.Mounts = []*runtimeapi.Mount{bind(src, target)}
			e.attempt(t, pod, podCfg, c, victim, nil)
			for p, want := range files {
				if b, err := os.ReadFile(p); err != nil || string(b) != want {
					t.Errorf("%s under the volume now reads %q (%v): a write meant for /proc landed there", p, b, err)
				}
			}
		})
	}
}

// TestRunc_CVE_2023_28642_ProcSymlinkInImage (and CVE-2019-16884): an
// image whose /proc was a symlink made runc mount procfs elsewhere and
// skip the LSM profile; a volume over /proc did the same. Images whose
// /proc, /sys or /dev is a symlink (to a dir of the image, to /, out of
// the root) must be refused or get real procfs, sysfs and /dev where the
// container looks for them.
func TestRunc_CVE_2023_28642_ProcSymlinkInImage(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	pod, podCfg := e.RunPod("cve-2023-28642")
	for _, c := range []struct{ name, target string }{
		{"proc", "/tmp"}, {"proc", "/"}, {"proc", up + rel(victim.Dir)}, {"sys", "/tmp"}, {"sys", victim.Dir}, {"dev", "/tmp"}, {"dev", victim.Dir},
	} {
		t.Run(c.name+" to "+c.target, func(t *testing.T) {
			// The busybox layer has no /proc, /sys or /dev of its own to
			// shadow: the symlink is what the container's root holds.
			img := e.push("special-symlinks", image(t, e.busybox(), nil, layer(t, entry{name: c.name, typ: '2', link: c.target, mode: 0o777})))
			e.mustPull(img)
			cc := e.ctr("special", img)
			e.attempt(t, pod, podCfg, cc, victim, func(id string) {
				if fs := e.sh(id, "stat -f -c %T /proc /sys"); fs != "proc\nsysfs" {
					t.Errorf("/proc and /sys are %q", fs)
				}
				e.cantSee(t, id, "the victim", "cat "+victim.Dir+"/victim /proc/victim /sys/victim /dev/victim")
			})
		})
	}
}

// TestContainerd_CVE_2022_23648_ImageVolumePaths: containerd copied the
// contents of an image config's Volumes paths into a volume, and a path
// of ../.. read host files into the container. berth ignores Volumes of
// the image config (the kubelet's volumes are the CRI's mounts), so
// hostile ones must change nothing; and an image volume (KEP 4639) with
// an image_sub_path that climbs, or that is a symlink of the image
// pointing out, must show the image's files only.
func TestContainerd_CVE_2022_23648_ImageVolumePaths(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	pod, podCfg := e.RunPod("cve-2022-23648")
	img := e.push("image-volumes", image(t, e.busybox(), func(c *v1.Config) {
		c.Volumes = map[string]struct{}{"/../../../../../../../../" + rel(victim.Dir): {}, victim.Dir: {}, "/proc/1/root" + victim.Dir: {}, "/vol": {}}
	}, layer(t, dir("data"), file("data/inside", "inside\n"), symlink("data/out", up+rel(victim.Dir)), symlink("data/abs", victim.Dir), symlink("absdir", victim.Dir))))
	e.mustPull(img)
	t.Run("config volumes", func(t *testing.T) {
		e.attempt(t, pod, podCfg, e.ctr("volumes", img), victim, func(id string) {
			e.cantSee(t, id, "image volumes", "cat "+victim.Dir+"/victim /vol/victim")
		})
	})
	for _, sub := range []string{"../../../../../../" + rel(victim.Dir), "data/out", "data/abs", "absdir", "data/../../../../" + rel(victim.Dir), "/" + victim.Dir} {
		t.Run("image_sub_path "+sub, func(t *testing.T) {
			c := e.ctr("subpath", "")
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/iv", Image: &runtimeapi.ImageSpec{Image: img}, ImageSubPath: sub, Readonly: true}}
			e.attempt(t, pod, podCfg, c, victim, func(id string) {
				e.cantSee(t, id, "the image volume", "cat /iv/victim /iv/sub/victim")
			})
			// Resolved inside the image, each names nothing there.
			_, err := e.start(pod, podCfg, c)
			wantCode(t, err, codes.InvalidArgument, "image_sub_path")
		})
	}
	// The same mount with a sub path that is there works.
	c := e.ctr("subpath-ok", "")
	c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/iv", Image: &runtimeapi.ImageSpec{Image: img}, ImageSubPath: "data", Readonly: true}}
	id := e.mustStart(pod, podCfg, c)
	if out := e.sh(id, "cat /iv/inside"); out != "inside" {
		t.Errorf("the image volume's sub path shows %q", out)
	}
}
