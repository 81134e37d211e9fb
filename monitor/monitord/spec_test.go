package monitord

import (
	"encoding/json"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestSpecFacts(t *testing.T) {
	own := &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}}}
	for _, tc := range []struct {
		name     string
		spec     specs.Spec
		terminal bool
		plain    bool
		hostPID  bool
	}{
		{"own PID namespace", specs.Spec{Process: &specs.Process{}, Linux: own}, false, true, false},
		{"terminal", specs.Spec{Process: &specs.Process{Terminal: true}, Linux: own}, true, true, false},
		{"pod's PID namespace", specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace, Path: "/proc/1/ns/pid"}}}}, false, false, false},
		{"host's PID namespace", specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace}}}}, false, false, true},
		{"poststop hook", specs.Spec{Process: &specs.Process{}, Linux: own, Hooks: &specs.Hooks{Poststop: []specs.Hook{{Path: "/bin/true"}}}}, false, false, false},
		{"other hooks only", specs.Spec{Process: &specs.Process{}, Linux: own, Hooks: &specs.Hooks{Prestart: []specs.Hook{{Path: "/bin/true"}}}}, false, true, false},
		{"intel RDT", specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{Namespaces: own.Namespaces, IntelRdt: &specs.LinuxIntelRdt{ClosID: "x"}}}, false, false, false},
		{"no linux section", specs.Spec{Process: &specs.Process{}}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			var f specFacts
			if err := json.Unmarshal(data, &f); err != nil {
				t.Fatal(err)
			}
			if f.Process == nil || f.Process.Terminal != tc.terminal {
				t.Errorf("terminal: got %+v, want %v", f.Process, tc.terminal)
			}
			if got := f.plainDestroy(); got != tc.plain {
				t.Errorf("plainDestroy = %v, want %v", got, tc.plain)
			}
			if got := f.hostPID(); got != tc.hostPID {
				t.Errorf("hostPID = %v, want %v", got, tc.hostPID)
			}
		})
	}
}
