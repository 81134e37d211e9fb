package spec

import (
	"path"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzBuild feeds arbitrary CRI container configs (as protobuf bytes, the
// form the kubelet sends) to Build: it must never panic, and a spec it
// accepts must be runnable.
func FuzzBuild(f *testing.F) {
	seeds := []*runtimeapi.ContainerConfig{
		{Command: []string{"sh"}},
		{Args: []string{"x"}, WorkingDir: "/w", Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b")}}},
		{Mounts: []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", Propagation: 2}}},
		{Mounts: []*runtimeapi.Mount{{ContainerPath: "/iv", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}, ImageSubPath: "etc"}}},
		{Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: 1 << 20, OomScoreAdj: 5},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				RunAsUsername: "www-data", Seccomp: &runtimeapi.SecurityProfile{},
				Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"ALL"}, DropCapabilities: []string{"KILL"}},
			},
		}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := &runtimeapi.ContainerConfig{}
		if err := proto.Unmarshal(data, cfg); err != nil {
			t.Skip()
		}
		in := baseInput()
		in.Config = cfg
		s, err := Build(in)
		if err != nil {
			return
		}
		if len(s.Process.Args) == 0 || !path.IsAbs(s.Process.Cwd) || s.Linux.CgroupsPath == "" {
			t.Fatalf("accepted an unrunnable spec: args %q cwd %q", s.Process.Args, s.Process.Cwd)
		}
		if s.Process.OOMScoreAdj != nil && (*s.Process.OOMScoreAdj < -1000 || *s.Process.OOMScoreAdj > 1000) {
			t.Fatalf("oom_score_adj %d", *s.Process.OOMScoreAdj)
		}
	})
}
