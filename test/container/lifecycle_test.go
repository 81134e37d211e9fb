package container_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

func TestLifecycleLogsAndProcess(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("life")
	pod := e.runPod(podCfg)
	cfg := e.ctrConfig("app", `echo "args:$0 $1"; echo "env:$GREETING"; pwd; echo to-stderr >&2; printf no-newline`)
	cfg.Command = []string{"sh", "-c", cfg.Command[2], "zero", "one"}
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hello")}}
	cfg.WorkingDir = "/tmp"
	id := e.create(pod, podCfg, cfg)
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.CreatedAt == 0 {
		t.Fatalf("after create: %v", st)
	}
	// The name is reserved in the pod.
	if _, err := e.d.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg}); status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "app") {
		t.Fatalf("second create with the same name: %v", err)
	}
	e.start(id)
	st := e.waitExit(id, 20*time.Second)
	if st.ExitCode != 0 || st.Reason != "Completed" || st.StartedAt == 0 || st.FinishedAt < st.StartedAt {
		t.Fatalf("status: %v", st)
	}
	if st.ImageRef == "" || st.Image.GetImage() != e.image || st.Labels["name"] != "app" {
		t.Fatalf("image/labels in status: %v", st)
	}
	// stdout and stderr are two pipes: their order relative to each
	// other is not kept, each one's is.
	// (stderr's record may come last: after stdout's partial one.)
	got := logText(t, st.LogPath)
	stdout := strings.Replace(got, "to-stderr\n", "", 1)
	if stdout == got {
		stdout = strings.TrimSuffix(got, "\nto-stderr")
	}
	want := "args:zero one\nenv:hello\n/tmp\nno-newline"
	if stdout != want || !strings.Contains(got, "to-stderr") {
		t.Fatalf("log:\n%s\nwant:\n%s\nand to-stderr", got, want)
	}

	// Filters.
	ctx := framework.Ctx(t)
	for name, f := range map[string]*runtimeapi.ContainerFilter{
		"id":     {Id: id},
		"prefix": {Id: id[:12]},
		"pod":    {PodSandboxId: pod},
		"state":  {State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}},
		"labels": {LabelSelector: map[string]string{"name": "app"}},
	} {
		resp, err := e.d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
		if err != nil || len(resp.Containers) != 1 || resp.Containers[0].Id != id {
			t.Errorf("filter %s: %v %v", name, resp, err)
		}
	}
	resp, _ := e.d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if len(resp.Containers) != 0 {
		t.Errorf("running filter: %v", resp.Containers)
	}

	// Errors.
	if _, err := e.d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("status of unknown id: %v", err)
	}
	bad := e.ctrConfig("bad", "true")
	bad.Image.Image = "127.0.0.1:1/missing:latest"
	if _, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg}); status.Code(err) != codes.NotFound {
		t.Errorf("missing image: %v", err)
	}
	bad = e.ctrConfig("bad", "true")
	// A missing source is made a directory, as the kubelet expects for
	// hostPath volumes of no type; one that cannot be made is refused.
	bad.Mounts = []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: "/proc/berth-cannot-make/this"}}
	if _, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "mounts[0].host_path") {
		t.Errorf("bad mount: %v", err)
	}
	bad = e.ctrConfig("bad", "true")
	bad.Linux.SecurityContext.RunAsUsername = "ghost"
	if _, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "run_as_username") {
		t.Errorf("unknown user: %v", err)
	}
	bad = e.ctrConfig("bad", "true")
	bad.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/no/profile.json"}
	if _, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "seccomp") {
		t.Errorf("missing seccomp profile: %v", err)
	}
	if _, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: "nope", Config: e.ctrConfig("x", "true")}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown pod: %v", err)
	}
	// The failed creates left nothing: the name "bad" is free again.
	e.run(pod, podCfg, e.ctrConfig("bad", "true"))

	// Remove is idempotent and keeps the log.
	for i := 0; i < 2; i++ {
		if _, err := e.d.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
	}
	if _, err := e.d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("status after remove: %v", err)
	}
	if logText(t, st.LogPath) != got {
		t.Errorf("log changed by remove")
	}
}
