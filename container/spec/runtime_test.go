package spec

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRuntimeHandler: what a pod's runtime handler settings change in
// its containers' specs.
func TestRuntimeHandler(t *testing.T) {
	privileged := func(in *Input) {
		in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}}
		sc(in).Privileged = true
	}
	rroMount := func(in *Input) {
		in.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/srv/data", Readonly: true, RecursiveReadOnly: true}}
	}
	tests := []struct {
		name        string
		rt          Runtime
		setup       func(*Input)
		wantDevices int    // host devices in the spec
		wantAll     bool   // the device cgroup allows everything
		wantErr     string // InvalidError text
		wantAnn     map[string]string
	}{
		{name: "privileged, default handler", setup: privileged, wantDevices: 1, wantAll: true},
		{name: "privileged without host devices", rt: Runtime{Handler: "h", PrivilegedWithoutHostDevices: true}, setup: privileged},
		{name: "rro allowed", setup: rroMount},
		{name: "rro disabled", rt: Runtime{Handler: "no-rro", NoRecursiveReadOnly: true}, setup: rroMount,
			wantErr: `mounts[0].recursive_read_only: the pod's runtime handler "no-rro" has recursive read-only mounts disabled`},
		{name: "default annotations", rt: Runtime{Annotations: map[string]string{"io.example/a": "handler", "io.example/b": "handler"}},
			setup:   func(in *Input) { in.Config.Annotations = map[string]string{"io.example/b": "container"} },
			wantAnn: map[string]string{"io.example/a": "handler", "io.example/b": "container", AnnotationSandboxID: "p1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := baseInput()
			in.Pod.Runtime = tt.rt
			tt.setup(in)
			s, err := Build(in)
			if tt.wantErr != "" {
				if err == nil || !IsInvalid(err) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want an invalid argument saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Linux.Devices) != tt.wantDevices {
				t.Errorf("devices %v, want %d host devices", s.Linux.Devices, tt.wantDevices)
			}
			if all := s.Linux.Resources.Devices[0].Allow; all != tt.wantAll {
				t.Errorf("device cgroup allows all: %t, want %t", all, tt.wantAll)
			}
			for k, v := range tt.wantAnn {
				if s.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q", k, s.Annotations[k], v)
				}
			}
		})
	}
}
