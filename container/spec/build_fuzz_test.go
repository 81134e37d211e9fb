package spec

import (
	"path"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzBuildPod extends FuzzBuild: the pod's config is fuzzed too, and the
// spec may be the pod's own (pause) one. Build must not panic, must refuse
// with an InvalidError naming the field, and a spec it accepts is
// well-formed: a command, an absolute working directory, the prepared
// rootfs as root, KEY=value environment, absolute mount destinations, a
// cgroup path, and namespaces named once each.
func FuzzBuildPod(f *testing.F) {
	pods := []*runtimeapi.PodSandboxConfig{
		baseInput().Pod.Config,
		{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod", Namespace: "ns", Uid: "u"},
			Hostname: "h", DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}},
			Linux: &runtimeapi.LinuxPodSandboxConfig{
				CgroupParent: "/kubepods/besteffort/podu",
				Sysctls:      map[string]string{"net.ipv4.ip_forward": "1", "kernel.shm_rmid_forced": "1"},
				SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
					NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_POD},
					RunAsUser:        &runtimeapi.Int64Value{Value: 1000}, ReadonlyRootfs: true, Privileged: true,
				},
			},
		},
	}
	ctrs := []*runtimeapi.ContainerConfig{
		baseInput().Config,
		{Command: []string{"sh"}, Envs: []*runtimeapi.KeyValue{{Key: "", Value: []byte("=x")}, {Key: "A=B", Value: []byte("c")}}},
		{Mounts: []*runtimeapi.Mount{{ContainerPath: "relative", HostPath: "/h"}, {ContainerPath: "/a/../../b", HostPath: "/h2", SelinuxRelabel: true}}},
		{WorkingDir: "rel", Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "c0"},
			MaskedPaths:      []string{"/proc/kcore"}, ReadonlyPaths: []string{"/proc/sys"},
			Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "../x"},
		}}},
	}
	for i, p := range pods {
		for _, c := range ctrs {
			pb, _ := proto.Marshal(p)
			cb, _ := proto.Marshal(c)
			f.Add(cb, pb, i == 1)
		}
	}
	f.Fuzz(func(t *testing.T, ctrBytes, podBytes []byte, sandbox bool) {
		cfg, pod := &runtimeapi.ContainerConfig{}, &runtimeapi.PodSandboxConfig{}
		if proto.Unmarshal(ctrBytes, cfg) != nil || proto.Unmarshal(podBytes, pod) != nil {
			t.Skip()
		}
		in := baseInput()
		in.Config, in.Pod.Config, in.Sandbox = cfg, pod, sandbox
		s, err := Build(in)
		if err != nil {
			if !IsInvalid(err) && err.Error() == "" {
				t.Fatalf("refused without a message")
			}
			return
		}
		if len(s.Process.Args) == 0 || !path.IsAbs(s.Process.Cwd) {
			t.Fatalf("accepted an unrunnable spec: args %q cwd %q", s.Process.Args, s.Process.Cwd)
		}
		if s.Root == nil || s.Root.Path != in.Rootfs {
			t.Fatalf("root %+v, want %s", s.Root, in.Rootfs)
		}
		for _, e := range s.Process.Env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				t.Fatalf("environment entry %q", e)
			}
		}
		for _, m := range s.Mounts {
			if !path.IsAbs(m.Destination) {
				t.Fatalf("mount destination %q is not absolute", m.Destination)
			}
		}
		if s.Linux == nil || s.Linux.CgroupsPath == "" {
			t.Fatal("no cgroup path")
		}
		seen := map[string]bool{}
		for _, ns := range s.Linux.Namespaces {
			if seen[string(ns.Type)] {
				t.Fatalf("namespace %s twice", ns.Type)
			}
			seen[string(ns.Type)] = true
		}
	})
}
