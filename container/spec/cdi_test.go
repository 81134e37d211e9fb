package spec

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeVendorSpec defines vendor.example/fake=gpu0 and gpu1, fully
// described (type, major, minor), so that nothing of the host is looked
// at: the host paths do not exist.
const fakeVendorSpec = `cdiVersion: "0.6.0"
kind: vendor.example/fake
containerEdits:
  env: ["FAKE_DRIVER=1"]
devices:
  - name: gpu0
    containerEdits:
      env: ["FAKE_DEVICE=gpu0", "A=cdi"]
      deviceNodes:
        - path: /dev/fake0
          hostPath: /nonexistent-berth-test/fake0
          type: c
          major: 1
          minor: 3
      mounts:
        - hostPath: /srv/fake/lib
          containerPath: /opt/fake
          options: [ro, nosuid, bind]
      hooks:
        - hookName: createContainer
          path: /usr/bin/fake-hook
          args: [fake-hook, gpu0]
  - name: gpu1
    containerEdits:
      env: ["FAKE_DEVICE1=gpu1"]
      deviceNodes:
        - path: /dev/fake1
          hostPath: /nonexistent-berth-test/fake1
          type: c
          major: 1
          minor: 5
          permissions: r
`

func writeSpecs(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func cdiEnv(s *specs.Spec, kv string) bool { return slices.Contains(s.Process.Env, kv) }

func device(s *specs.Spec, path string) *specs.LinuxDevice {
	for i := range s.Linux.Devices {
		if s.Linux.Devices[i].Path == path {
			return &s.Linux.Devices[i]
		}
	}
	return nil
}

func cgroupAllows(s *specs.Spec, major, minor int64, access string) bool {
	for _, r := range s.Linux.Resources.Devices {
		if r.Allow && r.Type == "c" && r.Major != nil && *r.Major == major && r.Minor != nil && *r.Minor == minor && r.Access == access {
			return true
		}
	}
	return false
}

func mountAt(s *specs.Spec, dst string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dst {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestCDI(t *testing.T) {
	cdiDevs := func(names ...string) func(*Input) {
		return func(in *Input) {
			for _, n := range names {
				in.Config.CDIDevices = append(in.Config.CDIDevices, &runtimeapi.CDIDevice{Name: n})
			}
		}
	}
	annotate := func(k, v string) func(*Input) {
		return func(in *Input) {
			if in.Config.Annotations == nil {
				in.Config.Annotations = map[string]string{}
			}
			in.Config.Annotations[k] = v
		}
	}
	gpu0 := func(t *testing.T, s *specs.Spec) {
		t.Helper()
		d := device(s, "/dev/fake0")
		if d == nil || d.Type != "c" || d.Major != 1 || d.Minor != 3 {
			t.Errorf("device /dev/fake0 = %+v, want c 1:3", d)
		}
		if !cgroupAllows(s, 1, 3, "rwm") {
			t.Errorf("no cgroup rule allowing c 1:3 rwm in %+v", s.Linux.Resources.Devices)
		}
		for _, kv := range []string{"FAKE_DRIVER=1", "FAKE_DEVICE=gpu0", "A=cdi", "PATH=/bin"} {
			if !cdiEnv(s, kv) {
				t.Errorf("env %v lacks %s", s.Process.Env, kv)
			}
		}
		if cdiEnv(s, "A=image") {
			t.Errorf("env %v: the image's A was not replaced by the device's", s.Process.Env)
		}
		m := mountAt(s, "/opt/fake")
		if m == nil || m.Source != "/srv/fake/lib" || !slices.Contains(m.Options, "ro") {
			t.Errorf("mount /opt/fake = %+v, want /srv/fake/lib ro", m)
		}
		if s.Hooks == nil || len(s.Hooks.CreateContainer) != 1 || s.Hooks.CreateContainer[0].Path != "/usr/bin/fake-hook" {
			t.Errorf("hooks = %+v, want the createContainer hook /usr/bin/fake-hook", s.Hooks)
		}
	}
	gpu1 := func(t *testing.T, s *specs.Spec) {
		t.Helper()
		if device(s, "/dev/fake1") == nil || !cgroupAllows(s, 1, 5, "r") || !cdiEnv(s, "FAKE_DEVICE1=gpu1") {
			t.Errorf("gpu1 not applied: devices %+v, rules %+v, env %v", s.Linux.Devices, s.Linux.Resources.Devices, s.Process.Env)
		}
	}
	none := func(t *testing.T, s *specs.Spec) {
		t.Helper()
		if device(s, "/dev/fake0") != nil || cdiEnv(s, "FAKE_DRIVER=1") || mountAt(s, "/opt/fake") != nil {
			t.Errorf("CDI edits applied: devices %+v, env %v", s.Linux.Devices, s.Process.Env)
		}
	}
	const other = `cdiVersion: "0.6.0"
kind: other.example/thing
devices:
  - name: a
    containerEdits:
      env: ["OTHER=1"]
`
	for _, tc := range []struct {
		name  string
		files map[string]string // spec dir contents
		tweak func(*Input)
		noCDI bool // CDI off
		check func(*testing.T, *specs.Spec)
		// wantErr is in the error; notFound: it is a NotFoundError,
		// else an InvalidError; field is its field.
		wantErr  []string
		notFound bool
		field    string
	}{
		{name: "no devices asked", files: map[string]string{"fake.yaml": fakeVendorSpec}, check: none},
		{name: "cdi_devices", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: cdiDevs("vendor.example/fake=gpu0"), check: gpu0},
		{name: "two devices of one spec", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: cdiDevs("vendor.example/fake=gpu0", "vendor.example/fake=gpu1"),
			check: func(t *testing.T, s *specs.Spec) { gpu0(t, s); gpu1(t, s) }},
		{name: "annotation, comma-separated", files: map[string]string{"fake.yaml": fakeVendorSpec},
			tweak: annotate("cdi.k8s.io/fake-plugin_dev", "vendor.example/fake=gpu0,vendor.example/fake=gpu1"),
			check: func(t *testing.T, s *specs.Spec) { gpu0(t, s); gpu1(t, s) }},
		{name: "same device both ways, once", files: map[string]string{"fake.json": fakeVendorJSON},
			tweak: func(in *Input) {
				cdiDevs("vendor.example/fake=gpu0")(in)
				annotate("cdi.k8s.io/fake-plugin_dev", "vendor.example/fake=gpu0")(in)
			},
			check: func(t *testing.T, s *specs.Spec) {
				gpu0(t, s)
				n := 0
				for _, r := range s.Linux.Resources.Devices {
					if r.Allow && r.Major != nil && *r.Major == 1 && *r.Minor == 3 {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%d cgroup rules for c 1:3, want 1", n)
				}
			}},
		{name: "other annotations ignored", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: annotate("cdi.k8s.io.not/x", "nonsense"), check: none},
		{name: "off: names ignored", noCDI: true, tweak: cdiDevs("vendor.example/fake=gpu0"), check: none},
		{name: "off: a bad name still refused", noCDI: true, tweak: cdiDevs("gpu0"), wantErr: []string{`"gpu0" is not a CDI device name`}, field: "cdi_devices[0].name"},
		{name: "not a qualified name", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: cdiDevs("vendor.example/fake=gpu0", "fake=gpu0"),
			wantErr: []string{`"fake=gpu0" is not a CDI device name`}, field: "cdi_devices[1].name"},
		{name: "bad name in an annotation", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: annotate("cdi.k8s.io/p_d", "vendor.example/fake=gpu0,,"),
			wantErr: []string{`"" is not a CDI device name`}, field: "annotations[cdi.k8s.io/p_d]"},
		{name: "unknown device", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: cdiDevs("vendor.example/fake=gpu9"),
			wantErr: []string{`CDI device "vendor.example/fake=gpu9"`, "no spec file in", "vendor.example/fake=gpu0, vendor.example/fake=gpu1"}, notFound: true, field: "cdi_devices[0].name"},
		{name: "unknown vendor", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: annotate("cdi.k8s.io/p_d", "nobody.example/x=y"),
			wantErr: []string{`CDI device "nobody.example/x=y"`, "no device of kind nobody.example/x"}, notFound: true, field: "annotations[cdi.k8s.io/p_d]"},
		{name: "broken spec of the device's kind", files: map[string]string{"fake.yaml": strings.Replace(fakeVendorSpec, "major: 1\n", "major: one\n", 1)},
			tweak: cdiDevs("vendor.example/fake=gpu0"), wantErr: []string{`CDI device "vendor.example/fake=gpu0"`, "fake.yaml", "broken"}, field: "cdi_devices[0].name"},
		{name: "spec that does not parse", files: map[string]string{"fake.yaml": fakeVendorSpec, "zz.json": "{not json"},
			tweak: cdiDevs("vendor.example/fake=gpu7"), wantErr: []string{"zz.json", "broken"}, field: "cdi_devices[0].name"},
		{name: "another vendor's broken spec does not matter", files: map[string]string{"fake.yaml": fakeVendorSpec, "other.yaml": strings.Replace(other, "0.6.0", "9.9.9", 1)},
			tweak: cdiDevs("vendor.example/fake=gpu0"), check: gpu0},
		{name: "nor does it explain an unknown device", files: map[string]string{"fake.yaml": fakeVendorSpec, "other.yaml": strings.Replace(other, "0.6.0", "9.9.9", 1)},
			tweak: cdiDevs("vendor.example/fake=gpu9"), wantErr: []string{"no spec file in"}, notFound: true, field: "cdi_devices[0].name"},
		{name: "nor does another vendor's that does not parse", files: map[string]string{"fake.yaml": fakeVendorSpec, "other.yaml": other + "  - name: [\n", "other.json": `{"kind": "other.example/thing", "devices": [`},
			tweak: cdiDevs("vendor.example/fake=gpu9"), wantErr: []string{"no spec file in"}, notFound: true, field: "cdi_devices[0].name"},
		{name: "device defined twice", files: map[string]string{"fake.yaml": fakeVendorSpec, "fake-copy.yaml": fakeVendorSpec},
			tweak: cdiDevs("vendor.example/fake=gpu0"), wantErr: []string{"conflicting device", "fake.yaml", "fake-copy.yaml"}, field: "cdi_devices[0].name"},
		{name: "edits that do not apply", files: map[string]string{"fake.yaml": `cdiVersion: "0.6.0"
kind: vendor.example/fake
devices:
  - name: gone
    containerEdits:
      deviceNodes:
        - path: /dev/fake-gone
          hostPath: /nonexistent-berth-test/gone
`}, tweak: cdiDevs("vendor.example/fake=gone"), wantErr: []string{`CDI device "vendor.example/fake=gone"`, "fake.yaml", "/nonexistent-berth-test/gone"}, field: "cdi_devices[0].name"},
		{name: "pod user namespace: mounts id-mapped", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: func(in *Input) {
			cdiDevs("vendor.example/fake=gpu0")(in)
			in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: podUserNS(testMapping, testMapping)}}}
		}, check: func(t *testing.T, s *specs.Spec) {
			gpu0(t, s)
			if m := mountAt(s, "/opt/fake"); m == nil || !slices.Contains(m.Options, "idmap") {
				t.Errorf("CDI mount %+v, want id-mapped with the pod's user namespace", m)
			}
			if m := mountAt(s, "/proc"); slices.Contains(m.Options, "idmap") {
				t.Errorf("/proc id-mapped: %+v", m)
			}
		}},
		{name: "no user namespace: mounts as the spec says", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: cdiDevs("vendor.example/fake=gpu0"),
			check: func(t *testing.T, s *specs.Spec) {
				if m := mountAt(s, "/opt/fake"); m == nil || slices.Contains(m.Options, "idmap") {
					t.Errorf("CDI mount %+v, want no idmap", m)
				}
			}},
		{name: "sandbox gets none", files: map[string]string{"fake.yaml": fakeVendorSpec}, tweak: func(in *Input) {
			cdiDevs("vendor.example/fake=gpu0")(in)
			in.Sandbox = true
		}, check: none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeSpecs(t, dir, tc.files)
			in := baseInput()
			if !tc.noCDI {
				in.CDI = NewCDIRegistry([]string{dir}, slog.New(slog.DiscardHandler))
			}
			if tc.tweak != nil {
				tc.tweak(in)
			}
			s, err := Build(in)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				tc.check(t, s)
				return
			}
			if err == nil {
				t.Fatalf("built, want an error with %q", tc.wantErr)
			}
			t.Log(err)
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			var field string
			if nf := (*NotFoundError)(nil); errors.As(err, &nf) {
				field = nf.Field
			} else if ie := (*InvalidError)(nil); errors.As(err, &ie) {
				field = ie.Field
			}
			if IsNotFound(err) != tc.notFound || IsInvalid(err) == tc.notFound {
				t.Errorf("error %q: not found %v, invalid %v; want not found %v", err, IsNotFound(err), IsInvalid(err), tc.notFound)
			}
			if field != tc.field {
				t.Errorf("error %q names field %q, want %q", err, field, tc.field)
			}
		})
	}
}

// fakeVendorJSON is gpu0 of fakeVendorSpec in JSON, which the library
// reads as well.
const fakeVendorJSON = `{"cdiVersion": "0.6.0", "kind": "vendor.example/fake",
 "containerEdits": {"env": ["FAKE_DRIVER=1"]},
 "devices": [{"name": "gpu0", "containerEdits": {
   "env": ["FAKE_DEVICE=gpu0", "A=cdi"],
   "deviceNodes": [{"path": "/dev/fake0", "hostPath": "/nonexistent-berth-test/fake0", "type": "c", "major": 1, "minor": 3}],
   "mounts": [{"hostPath": "/srv/fake/lib", "containerPath": "/opt/fake", "options": ["ro", "nosuid", "bind"]}],
   "hooks": [{"hookName": "createContainer", "path": "/usr/bin/fake-hook", "args": ["fake-hook", "gpu0"]}]}}]}`

// TestCDIRegistryRereads: spec files written, changed and removed after
// the registry was made are seen by the next Inject, and a spec dir made
// after it too.
func TestCDIRegistryRereads(t *testing.T) {
	base := t.TempDir()
	static, dynamic := filepath.Join(base, "etc"), filepath.Join(base, "run")
	if err := os.Mkdir(static, 0o755); err != nil {
		t.Fatal(err)
	}
	r := NewCDIRegistry([]string{static, dynamic}, slog.New(slog.DiscardHandler))
	inject := func(name string) (*specs.Spec, error) {
		s := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{Resources: &specs.LinuxResources{}}}
		return s, r.Inject(s, []string{name})
	}
	write := func(dir, file, env string) {
		t.Helper()
		body := "cdiVersion: \"0.6.0\"\nkind: vendor.example/fake\ndevices:\n  - name: gpu0\n    containerEdits:\n      env: [\"" + env + "\"]\n"
		tmp := filepath.Join(dir, ".tmp-"+file)
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name    string
		do      func()
		wantEnv string // "" wants the device unknown
	}{
		{"none yet", func() {}, ""},
		{"written", func() { write(static, "fake.yaml", "V=1") }, "V=1"},
		{"renamed over, same size", func() { write(static, "fake.yaml", "V=2") }, "V=2"},
		{"rewritten in place", func() {
			p := filepath.Join(static, "fake.yaml")
			b, _ := os.ReadFile(p)
			// A coarse clock could give the rewrite the first write's
			// mtime; the size differs.
			if err := os.WriteFile(p, []byte(strings.Replace(string(b), "V=2", "V=33", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "V=33"},
		{"a later dir made, its spec wins", func() {
			if err := os.Mkdir(dynamic, 0o755); err != nil {
				t.Fatal(err)
			}
			write(dynamic, "fake.yaml", "V=dyn")
		}, "V=dyn"},
		{"it removed", func() { os.Remove(filepath.Join(dynamic, "fake.yaml")) }, "V=33"},
		{"all removed", func() { os.Remove(filepath.Join(static, "fake.yaml")) }, ""},
	}
	for _, st := range steps {
		st.do()
		s, err := inject("vendor.example/fake=gpu0")
		if st.wantEnv == "" {
			var ce *CDIError
			if !errors.As(err, &ce) || !ce.Unknown {
				t.Fatalf("%s: Inject = %v, want the device unknown", st.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !slices.Equal(s.Process.Env, []string{st.wantEnv}) {
			t.Fatalf("%s: env %v, want [%s]", st.name, s.Process.Env, st.wantEnv)
		}
	}
}

// BenchmarkCDIInject is the cost a create naming a CDI device pays: the
// freshness check of the spec dirs (unchanged files), the lookup and the
// edits of fakeVendorSpec's gpu0.
func BenchmarkCDIInject(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fake.yaml"), []byte(fakeVendorSpec), 0o644); err != nil {
		b.Fatal(err)
	}
	r := NewCDIRegistry([]string{dir, filepath.Join(dir, "missing")}, slog.New(slog.DiscardHandler))
	for b.Loop() {
		s := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{Resources: &specs.LinuxResources{}}}
		if err := r.Inject(s, []string{"vendor.example/fake=gpu0"}); err != nil {
			b.Fatal(err)
		}
	}
}
