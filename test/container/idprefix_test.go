package container_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// sharedPrefix makes objects until two ids begin with the same hex digit
// (at most 17, by pigeonhole: ids are random) and returns those two and
// every id made.
func sharedPrefix(t *testing.T, create func(i int) string) (a, b string, all []string) {
	t.Helper()
	byDigit := map[byte]string{}
	for i := range 17 {
		id := create(i)
		all = append(all, id)
		if other, ok := byDigit[id[0]]; ok {
			return other, id, all
		}
		byDigit[id[0]] = id
	}
	t.Fatalf("17 ids and no two share a first digit: %v", all)
	return "", "", nil
}

// uniquePrefix is the shortest prefix of id that begins no other of all.
func uniquePrefix(id string, all []string) string {
	for n := 1; n < len(id); n++ {
		unique := true
		for _, o := range all {
			if o != id && strings.HasPrefix(o, id[:n]) {
				unique = false
			}
		}
		if unique {
			return id[:n]
		}
	}
	return id
}

// wantAmbiguous checks a call on an ambiguous prefix: InvalidArgument
// with a message naming both candidates (not NotFound, and for Stop and
// Remove not success, which is what a missing id gets).
func wantAmbiguous(t *testing.T, call string, err error, a, b string) {
	t.Helper()
	st := status.Convert(err)
	if err == nil || st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "ambiguous") ||
		!strings.Contains(st.Message(), a) || !strings.Contains(st.Message(), b) {
		t.Errorf("%s on a prefix of %s and %s: %v; want InvalidArgument naming both", call, a, b, err)
	}
}

// TestAmbiguousIDPrefix: an id prefix that begins two pods' (or two
// containers') ids is an error naming both for every call taking an id,
// through CRI and through crictl, and changes nothing; a missing id still
// makes Stop and Remove succeed, and a unique prefix still works.
func TestAmbiguousIDPrefix(t *testing.T) {
	e := newEnv(t)
	rt := e.d.Runtime
	ctx := framework.Ctx(t)
	configs := map[string]*runtimeapi.PodSandboxConfig{}
	podA, podB, pods := sharedPrefix(t, func(i int) string {
		cfg := e.podConfig("prefix-" + string(rune('a'+i)))
		id := e.runPod(cfg)
		configs[id] = cfg
		return id
	})
	prefix := podA[:1]

	_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: prefix})
	wantAmbiguous(t, "StopPodSandbox", err, podA, podB)
	_, err = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: prefix})
	wantAmbiguous(t, "RemovePodSandbox", err, podA, podB)
	_, err = rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: prefix})
	wantAmbiguous(t, "PodSandboxStatus", err, podA, podB)
	_, err = rt.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: prefix})
	wantAmbiguous(t, "PodSandboxStats", err, podA, podB)
	_, err = rt.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: prefix, Resources: &runtimeapi.LinuxContainerResources{}})
	wantAmbiguous(t, "UpdatePodSandboxResources", err, podA, podB)
	_, err = rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: prefix, Port: []int32{80}})
	wantAmbiguous(t, "PortForward", err, podA, podB)
	_, err = rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: prefix, Config: e.ctrConfig("nowhere", "true"), SandboxConfig: configs[podA]})
	wantAmbiguous(t, "CreateContainer", err, podA, podB)
	for _, id := range pods {
		resp, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		if err != nil || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Fatalf("pod %s after the refused calls: %v %v", id, resp.GetStatus().GetState(), err)
		}
	}
	if resp, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: uniquePrefix(podA, pods)}); err != nil || resp.Status.Id != podA {
		t.Errorf("PodSandboxStatus by the unique prefix %s: %v", uniquePrefix(podA, pods), err)
	}
	missing := framework.RandHex(32)
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: missing}); err != nil {
		t.Errorf("StopPodSandbox of a missing pod: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: missing}); err != nil {
		t.Errorf("RemovePodSandbox of a missing pod: %v", err)
	}
	if _, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: missing}); status.Code(err) != codes.NotFound {
		t.Errorf("PodSandboxStatus of a missing pod: %v, want NotFound", err)
	}

	// Containers, created only: each is an overlay mount and a monitor
	// call, cheap enough to make 17.
	ctrA, ctrB, ctrs := sharedPrefix(t, func(i int) string {
		return e.create(podA, configs[podA], e.ctrConfig("prefix-"+string(rune('a'+i)), "sleep 1000"))
	})
	cprefix := ctrA[:1]
	_, err = rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cprefix})
	wantAmbiguous(t, "StartContainer", err, ctrA, ctrB)
	_, err = rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cprefix})
	wantAmbiguous(t, "StopContainer", err, ctrA, ctrB)
	_, err = rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cprefix})
	wantAmbiguous(t, "RemoveContainer", err, ctrA, ctrB)
	_, err = rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cprefix})
	wantAmbiguous(t, "ContainerStatus", err, ctrA, ctrB)
	_, err = rt.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: cprefix})
	wantAmbiguous(t, "ContainerStats", err, ctrA, ctrB)
	_, err = rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cprefix, Cmd: []string{"true"}, Timeout: 5})
	wantAmbiguous(t, "ExecSync", err, ctrA, ctrB)
	_, err = rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: cprefix, Cmd: []string{"true"}, Stdout: true})
	wantAmbiguous(t, "Exec", err, ctrA, ctrB)
	_, err = rt.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: cprefix, Stdout: true})
	wantAmbiguous(t, "Attach", err, ctrA, ctrB)
	_, err = rt.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: cprefix})
	wantAmbiguous(t, "ReopenContainerLog", err, ctrA, ctrB)
	_, err = rt.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: cprefix, Linux: &runtimeapi.LinuxContainerResources{}})
	wantAmbiguous(t, "UpdateContainerResources", err, ctrA, ctrB)
	for _, id := range ctrs {
		if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Fatalf("container %s after the refused calls: %v", id, st.State)
		}
	}
	if st := e.status(uniquePrefix(ctrA, ctrs)); st.Id != ctrA {
		t.Errorf("ContainerStatus by the unique prefix: %s", st.Id)
	}
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: missing}); err != nil {
		t.Errorf("StopContainer of a missing container: %v", err)
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: missing}); err != nil {
		t.Errorf("RemoveContainer of a missing container: %v", err)
	}

	// What the issue saw: crictl stopp 0 printed "Stopped sandbox 0".
	crictl := framework.CrictlOrCached(t)
	emptyConfig := filepath.Join(t.TempDir(), "crictl.yaml")
	os.WriteFile(emptyConfig, nil, 0o644)
	for _, args := range [][]string{{"stopp", prefix}, {"rmp", prefix}, {"stop", cprefix}, {"rm", cprefix}} {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(cctx, crictl, append([]string{"--config", emptyConfig, "--runtime-endpoint", "unix://" + e.d.Socket, "--timeout", "20s"}, args...)...).CombinedOutput()
		cancel()
		a, b := podA, podB
		if args[0] == "stop" || args[0] == "rm" {
			a, b = ctrA, ctrB
		}
		if err == nil || !strings.Contains(string(out), "ambiguous") || !strings.Contains(string(out), a) || !strings.Contains(string(out), b) {
			t.Errorf("crictl %s: %v\n%s\nwant a failure naming %s and %s", strings.Join(args, " "), err, out, a, b)
		}
	}
	for _, id := range pods {
		resp, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		if err != nil || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("pod %s after crictl: %v %v", id, resp.GetStatus().GetState(), err)
		}
	}
}
