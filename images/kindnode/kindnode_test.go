package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestAptMirror(t *testing.T) {
	for _, tc := range []struct {
		name, sources, want string
	}{
		{"debian.sources", "Types: deb\n# a comment: with a colon\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n" +
			"Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n", "http://deb.debian.org/debian"},
		{"the node's suite in the second stanza", "URIs: http://security.example/debian-security\nSuites: bookworm-security\n\nURIs: http://mirror.example/debian\nSuites: bookworm\n",
			"http://mirror.example/debian"},
		{"no blank line at the end", "URIs: http://m.example/debian\nSuites: bookworm", "http://m.example/debian"},
		{"no stanza for the suite", "URIs: http://m.example/debian\nSuites: trixie\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "debian.sources")
			if err := os.WriteFile(p, []byte(tc.sources), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := aptMirror(p)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("aptMirror = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("aptMirror = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		"/plain":        "/plain",
		`/a\040b`:       "/a b",
		`/tab\011x`:     "/tab\tx",
		`/short\04`:     `/short\04`,
		`/not\0999`:     `/not\0999`,
		`/end\134`:      `/end\`,
		`/two\040\040x`: "/two  x",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// A Debian root with merged /usr: /lib is a link to usr/lib, and the unit
// trimming and installs must act on usr/lib without leaving the root.
func TestTrimAndInstallMergedUsr(t *testing.T) {
	root := t.TempDir()
	units := filepath.Join(root, "usr/lib/systemd/system")
	for _, d := range []string{"multi-user.target.wants", "sockets.target.wants", "sysinit.target.wants"} {
		if err := os.MkdirAll(filepath.Join(units, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	touch := func(p string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(units, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch("multi-user.target.wants/cron.service")
	touch("sockets.target.wants/systemd-udevd-control.socket")
	touch("sockets.target.wants/dbus.socket")
	touch("sysinit.target.wants/systemd-tmpfiles-setup.service")
	touch("sysinit.target.wants/systemd-sysctl.service")

	if err := trimUnits(root); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"multi-user.target.wants/cron.service":                false,
		"sockets.target.wants/systemd-udevd-control.socket":   false,
		"sockets.target.wants/dbus.socket":                    true,
		"sysinit.target.wants/systemd-tmpfiles-setup.service": false,
		"sysinit.target.wants/systemd-sysctl.service":         true,
	} {
		_, err := os.Stat(filepath.Join(units, p))
		if got := err == nil; got != want {
			t.Errorf("%s present = %v, want %v", p, got, want)
		}
	}

	for _, it := range []item{
		{dest: "lib/systemd/system/x.service", data: []byte("[Unit]\n"), mode: 0o644},
		{dest: "etc/systemd/system/multi-user.target.wants/x.service", link: "/lib/systemd/system/x.service"},
		{dest: "etc/kubernetes/manifests", mode: os.ModeDir | 0o755},
		// A link pointing out of the root is resolved inside it.
		{dest: "escape/../../../outside", data: []byte("x"), mode: 0o644},
	} {
		if err := install(root, it); err != nil {
			t.Fatalf("install %s: %v", it.dest, err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(units, "x.service")); err != nil || string(data) != "[Unit]\n" {
		t.Errorf("x.service = %q, %v", data, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/x.service")); err != nil || target != "/lib/systemd/system/x.service" {
		t.Errorf("link = %q, %v", target, err)
	}
	if _, err := os.Stat(filepath.Join(root, "outside")); err != nil {
		t.Errorf("the escaping path was not kept inside the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "outside")); err == nil {
		t.Errorf("install wrote outside the root")
	}
}

func TestRootfsKeyIgnoresPackageOrder(t *testing.T) {
	var b builder
	b.arch = runtime.GOARCH
	before := b.rootfsKey()
	saved := packages
	defer func() { packages = saved }()
	packages = append([]string{saved[len(saved)-1]}, saved[:len(saved)-1]...)
	if got := b.rootfsKey(); got != before {
		t.Errorf("rootfsKey changed with the package order: %s, then %s", before, got)
	}
}

// TestArchNames: the host's root and tags keep the names cached images
// already have; another architecture's are named apart.
func TestArchNames(t *testing.T) {
	for _, tc := range []struct {
		arch, suffix string
		key          string // "" where it must differ from the host's
	}{
		{arch: runtime.GOARCH, suffix: "", key: "5985e3f2c3a8"},
		{arch: "arm64", suffix: "-arm64"},
	} {
		if tc.arch == "arm64" && runtime.GOARCH == "arm64" {
			continue
		}
		b := builder{arch: tc.arch}
		if got := b.archSuffix(); got != tc.suffix {
			t.Errorf("%s: archSuffix %q, want %q", tc.arch, got, tc.suffix)
		}
		host := builder{arch: runtime.GOARCH}
		switch got := b.rootfsKey(); {
		case tc.key != "" && got != tc.key:
			t.Errorf("%s: rootfsKey %s, want %s (the cached root's name)", tc.arch, got, tc.key)
		case tc.key == "" && got == host.rootfsKey():
			t.Errorf("%s: rootfsKey %s is the host's", tc.arch, got)
		}
	}
}
