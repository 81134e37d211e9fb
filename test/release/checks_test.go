package release_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

var files = []string{"berth", "berth-ctr", "berth-monitor", "berth-pause", "berth-podproc", "berth-spawn",
	"berth.service", "config.toml", "crictl.yaml"}

func checkTarball(t *testing.T, a *artifacts) {
	hdrs, data := entries(t, a)
	top := fmt.Sprintf("berth-%s-linux-amd64/", a.version)
	want := []string{top}
	for _, f := range files {
		want = append(want, top+f)
	}
	var got []string
	for _, h := range hdrs {
		got = append(got, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "root" || h.Gname != "root" {
			t.Errorf("%s: owner %d:%d (%s:%s), want root", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(a.epoch) {
			t.Errorf("%s: mtime %v, want the commit's %v", h.Name, h.ModTime, a.epoch)
		}
		mode := int64(0o644)
		if h.Typeflag == tar.TypeDir || !strings.Contains(filepath.Base(h.Name), ".") {
			mode = 0o755
		}
		if h.Mode != mode {
			t.Errorf("%s: mode %o, want %o", h.Name, h.Mode, mode)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries\n%q\nwant\n%q", got, want)
	}
	for name, wants := range map[string][]string{
		"berth.service": {"ExecStart=/usr/local/bin/berth\n", "Type=notify\n", "KillMode=process\n", "Delegate=yes\n"},
		"config.toml":   {`cgroup_driver = "systemd"`, `bin_dirs = ["/opt/cni/bin", "/usr/lib/cni"]`},
		"crictl.yaml":   {"runtime-endpoint: unix:///run/berth/berth.sock\n"},
	} {
		for _, w := range wants {
			if !bytes.Contains(data[top+name], []byte(w)) {
				t.Errorf("%s lacks %q", name, w)
			}
		}
	}
}

func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func checkDeb(t *testing.T, a *artifacts) {
	deb := filepath.Join(a.dir, a.deb)
	info := dpkgDeb(t, "--info", deb)
	for _, w := range []string{"Package: berth\n", "Architecture: amd64\n", "Depends: libc6 (>= 2.34), libseccomp2, iptables, mount\n",
		" postinst", " prerm", " postrm", " conffiles"} {
		if !strings.Contains(info, w) {
			t.Errorf("dpkg-deb --info lacks %q:\n%s", w, info)
		}
	}
	var paths []string
	for _, l := range strings.Split(strings.TrimSpace(dpkgDeb(t, "--contents", deb)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents line %q", l)
		}
		if f[1] != "root/root" {
			t.Errorf("%s: owner %s, want root/root", f[5], f[1])
		}
		if !strings.HasSuffix(f[5], "/") {
			paths = append(paths, strings.TrimPrefix(f[5], "."))
		}
	}
	slices.Sort(paths)
	want := []string{"/etc/berth/config.toml", "/etc/crictl.yaml"}
	for _, f := range files[:6] {
		want = append(want, "/usr/bin/"+f)
	}
	want = append(want, "/usr/lib/systemd/system/berth.service")
	if !slices.Equal(paths, want) {
		t.Errorf("files\n%q\nwant\n%q", paths, want)
	}
	ctl := t.TempDir()
	dpkgDeb(t, "--control", deb, ctl)
	conffiles, err := os.ReadFile(filepath.Join(ctl, "conffiles"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(conffiles)); !slices.Equal(got, want[:2]) {
		t.Errorf("conffiles %q, want %q", got, want[:2])
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		if fi, err := os.Stat(filepath.Join(ctl, s)); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: %v, not executable", s, err)
		}
	}
}

func checkVersion(t *testing.T, a *artifacts) {
	want := fmt.Sprintf("berth version %s\ncommit %s\ngo %s linux/amd64\n", a.version, a.commit, runtime.Version())
	if got := versionOf(t, a); got != want {
		t.Errorf("berth --version:\n%s\nwant\n%s", got, want)
	}
}

// checkReproducible builds the commit again from a git archive unpacked in
// a temporary directory with mkrelease, as hack/release would, and
// compares the bytes.
func checkReproducible(t *testing.T, a *artifacts) {
	if !clean(t, a.root) {
		t.Skip("the checkout has changes: the artifacts are not those of a commit")
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", a.root, a.commit, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v\n%s", err, out)
	}
	out := filepath.Join(t.TempDir(), "out")
	cmd = exec.Command("go", "run", ".", "-root", src, "-out", out, "-version", a.version, "-commit", a.commit,
		"-source-date-epoch", fmt.Sprint(a.epoch.Unix()), "-arch", "amd64", "-smoke=false")
	cmd.Dir = filepath.Join(src, "release")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkrelease from %s: %v\n%s", src, err, b)
	}
	for _, n := range []string{a.tarball, a.deb} {
		first, err := os.ReadFile(filepath.Join(a.dir, n))
		if err != nil {
			t.Fatal(err)
		}
		second, err := os.ReadFile(filepath.Join(out, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Errorf("%s: the build from %s differs", n, src)
		}
	}
}
