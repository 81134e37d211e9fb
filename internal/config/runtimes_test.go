package config

import (
	"bytes"
	"reflect"
	"testing"
)

func TestRuntimes(t *testing.T) {
	builtin := func() map[string]Runtime {
		return map[string]Runtime{"runc": {DefaultAnnotations: []string{}}, "berth": {DefaultAnnotations: []string{}}}
	}
	tests := []struct {
		name, toml string
		want       map[string]Runtime // nil: the built-in ones
		def        string             // default_runtime, "" for runc
		wantErr    string
	}{
		{name: "built in", toml: ""},
		{name: "test-handler", toml: "[runtimes.test-handler]",
			want: map[string]Runtime{"runc": {DefaultAnnotations: []string{}}, "berth": {DefaultAnnotations: []string{}}, "test-handler": {}}},
		{name: "every key", toml: `
default_runtime = "secure"
[runtimes.secure]
privileged_without_host_devices = true
disable_user_namespaces = true
disable_recursive_read_only_mounts = true
default_annotations = ["io.example/a=1", "io.example/b="]`,
			def: "secure",
			want: map[string]Runtime{"runc": {DefaultAnnotations: []string{}}, "berth": {DefaultAnnotations: []string{}}, "secure": {
				PrivilegedWithoutHostDevices: true, DisableUserNamespaces: true, DisableRecursiveReadOnly: true,
				DefaultAnnotations: []string{"io.example/a=1", "io.example/b="},
			}}},
		{name: "built-in replaced", toml: "[runtimes.runc]\nprivileged_without_host_devices = true",
			want: map[string]Runtime{"runc": {PrivilegedWithoutHostDevices: true}, "berth": {DefaultAnnotations: []string{}}}},
		{name: "unknown default", toml: `default_runtime = "kata"`,
			wantErr: `invalid default_runtime "kata": want the name of a [runtimes] table (berth or runc)`},
		{name: "empty default", toml: `default_runtime = ""`, wantErr: `invalid default_runtime "": want a non-empty value`},
		{name: "uppercase name", toml: "[runtimes.Kata]",
			wantErr: `invalid runtimes "Kata": want a runtime handler name that is a DNS label (lowercase letters, digits and '-', at most 63), as a RuntimeClass's handler`},
		{name: "empty name", toml: "[runtimes.\"\"]",
			wantErr: `invalid runtimes "": want a runtime handler name that is a DNS label (lowercase letters, digits and '-', at most 63), as a RuntimeClass's handler`},
		{name: "annotation without value", toml: "[runtimes.x]\ndefault_annotations = [\"a\"]",
			wantErr: `invalid runtimes.x.default_annotations "a": want key=value`},
		{name: "annotation without key", toml: "[runtimes.x]\ndefault_annotations = [\"=v\"]",
			wantErr: `invalid runtimes.x.default_annotations "=v": want key=value`},
		{name: "unknown key", toml: "[runtimes.x]\nruntime_type = \"io.containerd.runc.v2\"", wantErr: `unknown key "runtimes.x.runtime_type"`},
		{name: "wrong type", toml: "[runtimes.x]\nprivileged_without_host_devices = \"yes\"",
			wantErr: `wrong type for key "runtimes.x.privileged_without_host_devices": want a boolean (true or false), got the string "yes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.toml)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, def := tt.want, tt.def
			if want == nil {
				want = builtin()
			}
			if def == "" {
				def = "runc"
			}
			if !reflect.DeepEqual(got.Runtimes, want) || got.DefaultRuntime != def {
				t.Errorf("runtimes %+v, default %q; want %+v, %q", got.Runtimes, got.DefaultRuntime, want, def)
			}
			var b bytes.Buffer
			if err := got.WriteTOML(&b); err != nil {
				t.Fatal(err)
			}
			back, err := Parse(b.String())
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Errorf("round trip: %v\n%s", err, b.String())
			}
		})
	}
}

func TestHandler(t *testing.T) {
	cfg, err := Parse("default_runtime = \"strict\"\n[runtimes.strict]\nprivileged_without_host_devices = true\n[runtimes.test-handler]")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		ok     bool
		noDevs bool
	}{{"", true, true}, {"strict", true, true}, {"test-handler", true, false}, {"runc", true, false}, {"kata", false, false}} {
		rt, ok := cfg.Handler(tt.name)
		if ok != tt.ok || rt.PrivilegedWithoutHostDevices != tt.noDevs {
			t.Errorf("Handler(%q) = %+v, %t; want ok %t, privileged_without_host_devices %t", tt.name, rt, ok, tt.ok, tt.noDevs)
		}
	}
}
