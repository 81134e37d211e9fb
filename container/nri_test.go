package container

import (
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/monitor"
)

func TestNRIContainer(t *testing.T) {
	adj := 100
	shares := uint64(256)
	oci := &specs.Spec{
		Process: &specs.Process{
			Args: []string{"sleep", "1"}, Env: []string{"A=1"}, OOMScoreAdj: &adj,
			User:    specs.User{UID: 1000, GID: 100, AdditionalGids: []uint32{5}},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 10, Soft: 5}},
		},
		Annotations: map[string]string{spec.AnnotationContainerName: "app", "k": "v"},
		Mounts:      []specs.Mount{{Destination: "/data", Source: "/host", Type: "bind", Options: []string{"rbind"}}},
		Linux: &specs.Linux{
			CgroupsPath: "/pods/c1",
			Namespaces:  []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/run/netns/p"}},
			Resources:   &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}},
			Sysctl:      map[string]string{"net.core.somaxconn": "1"},
			// No seccomp: an unconfined container.
		},
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Labels:   map[string]string{"l": "1"},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
		}},
	}
	rec := &Record{ID: "c1", PodID: "p1", State: StateRunning, Pid: 42, CreatedAt: 1, StartedAt: 2}
	c := nriContainer(rec, cfg, oci)
	if c.Id != "c1" || c.PodSandboxId != "p1" || c.Name != "app" || c.State != api.ContainerState_CONTAINER_RUNNING || c.Pid != 42 {
		t.Errorf("identity: %v", c)
	}
	if c.Labels["l"] != "1" || c.Annotations["k"] != "v" || c.Image.GetName() != "busybox" {
		t.Errorf("labels %v annotations %v image %v", c.Labels, c.Annotations, c.Image)
	}
	if len(c.Args) != 2 || c.Env[0] != "A=1" || len(c.Mounts) != 1 || c.Mounts[0].Destination != "/data" {
		t.Errorf("process/mounts: %v %v %v", c.Args, c.Env, c.Mounts)
	}
	if len(c.Rlimits) != 1 || c.Rlimits[0].Type != "RLIMIT_NOFILE" || c.User.GetUid() != 1000 || c.User.GetAdditionalGids()[0] != 5 {
		t.Errorf("rlimits %v user %v", c.Rlimits, c.User)
	}
	l := c.GetLinux()
	if l.GetCgroupsPath() != "/pods/c1" || l.GetOomScoreAdj().GetValue() != 100 || l.GetResources().GetCpu().GetShares().GetValue() != 256 ||
		len(l.GetNamespaces()) != 1 || l.GetSysctl()["net.core.somaxconn"] != "1" || l.GetSeccompPolicy() != nil ||
		l.GetSeccompProfile().GetProfileType() != api.SecurityProfile_UNCONFINED {
		t.Errorf("linux: %v", l)
	}

	done := time.Unix(100, 0)
	exited := &Record{ID: "c1", PodID: "p1", State: StateExited, Pid: 42, Exit: &monitor.Exit{Code: 3, FinishedAt: done}}
	c = nriContainer(exited, cfg, nil)
	if c.State != api.ContainerState_CONTAINER_STOPPED || c.ExitCode != 3 || c.StatusReason != ReasonError || c.FinishedAt != done.UnixNano() || c.Pid != 0 {
		t.Errorf("exited: %v", c)
	}
	if nriContainer(&Record{State: StateCreating}, cfg, nil).State != api.ContainerState_CONTAINER_UNKNOWN {
		t.Error("a container being created is not unknown")
	}
}

func TestCRIResources(t *testing.T) {
	in := &runtimeapi.LinuxContainerResources{
		CpuShares: 512, CpuQuota: 20000, CpuPeriod: 100000, CpusetCpus: "0", CpusetMems: "0",
		MemoryLimitInBytes: 1 << 26, MemorySwapLimitInBytes: 1 << 27, OomScoreAdj: 7,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 1 << 21}},
	}
	oci := &specs.LinuxResources{}
	if err := spec.Resources(oci, in, false, "r"); err != nil {
		t.Fatal(err)
	}
	if got := criResources(oci, 7); !proto.Equal(got, in) {
		t.Errorf("round trip:\n got %v\nwant %v", got, in)
	}
	if got := criResources(nil, 3); got.GetOomScoreAdj() != 3 || got.GetCpuShares() != 0 {
		t.Errorf("nil resources: %v", got)
	}
}
