package apparmor

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerate(t *testing.T) {
	withAll := t.TempDir()
	for _, f := range []string{"abi/3.0", "tunables/global", "abstractions/base"} {
		writeFile(t, filepath.Join(withAll, f), "")
	}
	for _, tc := range []struct {
		name, etc  string
		want, none []string
	}{
		{name: "host has includes", etc: withAll,
			want: []string{"abi <abi/3.0>,", "#include <tunables/global>", "#include <abstractions/base>"},
			none: []string{"@{PROC}=/proc/"}},
		{name: "bare host", etc: t.TempDir(),
			want: []string{"@{PROC}=/proc/"},
			none: []string{"abi <", "#include"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Generate("p1", tc.etc)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			rules := []string{
				"profile p1 flags=(attach_disconnected,mediate_deleted) {",
				"  network,", "  capability,", "  file,", "  umount,", "  deny mount,",
				"signal (receive) peer=unconfined,", "signal (send,receive) peer=p1,",
				"ptrace (trace,read,tracedby,readby) peer=p1,",
				"deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,",
				"deny @{PROC}/kcore rwklx,", "deny @{PROC}/sysrq-trigger rwklx,",
				"deny /sys/firmware/** rwklx,", "deny /sys/devices/virtual/powercap/** rwklx,",
				"deny /sys/kernel/security/** rwklx,",
			}
			for _, w := range append(rules, tc.want...) {
				if !strings.Contains(text, w) {
					t.Errorf("profile lacks %q:\n%s", w, text)
				}
			}
			for _, n := range tc.none {
				if strings.Contains(text, n) {
					t.Errorf("profile has %q:\n%s", n, text)
				}
			}
		})
	}
}

// The parser, where installed, takes the profile without loading it
// (-Q), with the host's includes and without any.
func TestGenerateParses(t *testing.T) {
	parser, err := exec.LookPath("apparmor_parser")
	if err != nil {
		t.Skip("apparmor_parser is not installed")
	}
	for _, etc := range []string{"/etc/apparmor.d", t.TempDir()} {
		text, err := Generate(DefaultProfile, etc)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(parser, "-QK", "--base", etc, "-I", etc)
		cmd.Stdin = bytes.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("apparmor_parser (includes from %s): %v: %s", etc, err, out)
		}
	}
}

// This host's kernel has no AppArmor (nor does a test container's):
// the real paths say so, and nothing is loaded.
func TestSystemPathsWithoutAppArmor(t *testing.T) {
	if b, err := os.ReadFile(SystemPaths.Enabled); err == nil && strings.HasPrefix(string(b), "Y") {
		t.Skip("this host has AppArmor")
	}
	s := New(t.TempDir(), SystemPaths, nil)
	if s.Usable() == nil {
		t.Fatal("usable without AppArmor")
	}
	if _, err := s.EnsureDefault(context.Background()); err == nil {
		t.Fatal("EnsureDefault without AppArmor succeeded")
	}
	if s.Loaded(DefaultProfile) {
		t.Fatal("default loaded without AppArmor")
	}
}

func TestUsable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mod     func(p *Paths)
		env     string
		problem string // in Usable's error; "" usable
	}{
		{name: "usable"},
		{name: "disabled", mod: func(p *Paths) { writeFile(t, p.Enabled, "N\n") }, problem: "not enabled"},
		{name: "no module", mod: func(p *Paths) { p.Enabled += ".none" }, problem: "not enabled"},
		{name: "no securityfs", mod: func(p *Paths) { p.Profiles += ".none" }, problem: "securityfs"},
		{name: "no parser", mod: func(p *Paths) { p.Parser += ".none" }, problem: "apparmor_parser"},
		{name: "systemd container", mod: func(p *Paths) { writeFile(t, p.Container, "docker") }, problem: "inside a container"},
		{name: "container env", env: "podman", problem: "inside a container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := fakeKernel(t)
			if tc.mod != nil {
				tc.mod(&p)
			}
			t.Setenv("container", tc.env)
			err := New(t.TempDir(), p, nil).Usable()
			if tc.problem == "" && err != nil || tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)) {
				t.Fatalf("Usable: %v, want %q", err, tc.problem)
			}
		})
	}
}

// The stand-in parser logs each load and adds the profile to the fake
// kernel's list; a load happens only when the list lacks the profile or
// the recorded text differs.
func TestEnsureDefaultReloadsOnlyWhenChanged(t *testing.T) {
	t.Setenv("container", "")
	p, calls := fakeKernel(t)
	state := t.TempDir()
	s := New(state, p, nil)
	record := filepath.Join(state, "apparmor", DefaultProfile)
	ctx := context.Background()
	ensure := func(wantCalls int) {
		t.Helper()
		if name, err := s.EnsureDefault(ctx); err != nil || name != DefaultProfile {
			t.Fatalf("EnsureDefault: %q %v", name, err)
		}
		if n := countLines(t, calls); n != wantCalls {
			t.Fatalf("%d parser runs, want %d", n, wantCalls)
		}
	}
	ensure(1)
	want, _ := Generate(DefaultProfile, p.Etc)
	if got, err := os.ReadFile(record); err != nil || string(got) != string(want) {
		t.Fatalf("record %q %v", got, err)
	}
	if !s.Loaded(DefaultProfile) || s.Loaded("other") {
		t.Fatal("Loaded is wrong")
	}
	ensure(1) // loaded and unchanged
	writeFile(t, p.Profiles, "other (enforce)\n")
	ensure(2) // someone removed it
	writeFile(t, record, "an older profile")
	ensure(3) // berth's profile changed
	ensure(3)
	// A restarted daemon finds the record and the kernel's list agree.
	s = New(state, p, nil)
	ensure(3)

	// A text the parser rejects is not recorded.
	if err := os.Remove(record); err != nil {
		t.Fatal(err)
	}
	writeFile(t, p.Parser, "#!/bin/sh\necho 'syntax error' >&2\nexit 1\n")
	if _, err := New(state, p, nil).EnsureDefault(ctx); err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Fatalf("EnsureDefault with a failing parser: %v", err)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Fatalf("record after a failed load: %v", err)
	}
}

// fakeKernel makes paths in a temp dir for a host with AppArmor, whose
// parser is a shell script; calls is the file it logs its runs to.
func fakeKernel(t *testing.T) (Paths, string) {
	dir := t.TempDir()
	p := Paths{
		Enabled:   filepath.Join(dir, "enabled"),
		Profiles:  filepath.Join(dir, "profiles"),
		Etc:       filepath.Join(dir, "etc"),
		Parser:    filepath.Join(dir, "apparmor_parser"),
		Container: filepath.Join(dir, "container"),
	}
	calls := filepath.Join(dir, "calls")
	writeFile(t, p.Enabled, "Y\n")
	writeFile(t, p.Profiles, "")
	writeFile(t, calls, "")
	writeFile(t, p.Parser, "#!/bin/sh\n[ \"$1\" = -Kr ] || exit 2\ngrep -q '^profile "+DefaultProfile+" ' || exit 3\necho load >> "+calls+"\necho '"+DefaultProfile+" (enforce)' >> "+p.Profiles+"\n")
	if err := os.Chmod(p.Parser, 0o755); err != nil {
		t.Fatal(err)
	}
	return p, calls
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}
