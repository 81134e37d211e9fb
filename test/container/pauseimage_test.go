package container_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// pauseImage is what pause_image names; the config sends registry.k8s.io
// to the local test registry (a mirror), which serves test/images/mkimage's pause
// image (/pause, user 65535) under that name.
const pauseImage = "registry.k8s.io/pause:3.9"

// TestPauseImage runs pods whose pause comes from the configured sandbox
// image: pulled through the mirror on the first RunPodSandbox, run by the
// pod's monitor as the infra container, joined by the pod's containers,
// invisible to the container RPCs, surviving a SIGKILL of berth, and
// leaving nothing behind once removed.
func TestPauseImage(t *testing.T) {
	reg := framework.TestRegistry(t)
	e := newEnv(t, framework.WithConfig(fmt.Sprintf("pause_image = %q\n[registries.\"registry.k8s.io\"]\nmirrors = [\"http://%s\"]\n", pauseImage, reg)))
	ctx := framework.Ctx(t)
	if resp, err := e.d.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: pauseImage}}); err != nil || resp.Image != nil {
		t.Fatalf("pause image present before the first pod: %v %v", resp, err)
	}
	podCfg := e.podConfig("imgpause")
	podCfg.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "1000"}
	pod := e.runPod(podCfg)
	img, err := e.d.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: pauseImage}})
	if err != nil || img.Image == nil {
		t.Fatalf("pause image not pulled by RunPodSandbox: %v %v", img, err)
	}
	if !img.Image.Pinned {
		t.Errorf("sandbox image is not pinned")
	}

	state, pause := e.podStatus(pod)
	if state != runtimeapi.PodSandboxState_SANDBOX_READY || pause == 0 {
		t.Fatalf("pod %v, pause %d", state, pause)
	}
	mon := framework.MonitorOf(e.t, pod, pause)
	// The image's /pause, as the image's user, in the pod's namespaces.
	// The pod is ready once pause's namespaces are: libcontainer's init
	// may still be on its way to exec /pause.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pause))
		if filepath.Base(exe) == "pause" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pause runs %q", exe)
		}
	}
	if uid := statusLine(t, pause, "Uid"); !strings.HasPrefix(uid, "65535") {
		t.Errorf("pause runs as uid %q, want the image's 65535", uid)
	}
	if h := nsenter(t, pause, "-u", "hostname"); h != "imgpause" {
		t.Errorf("hostname in pause's UTS namespace = %q", h)
	}
	if v := nsenter(t, pause, "-n", "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"); v != "1000" {
		t.Errorf("pod sysctl in pause's netns = %q", v)
	}
	for _, ns := range []string{"uts", "ipc", "pid"} {
		if nsLink(t, pause, ns) == nsLink(t, os.Getpid(), ns) {
			t.Errorf("pause shares the host's %s namespace", ns)
		}
	}

	// A container joins pause's namespaces.
	cfg := e.ctrConfig("app", "hostname; sleep 1000")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	id := e.run(pod, podCfg, cfg)
	ctrPid := e.containerPid(id)
	for _, ns := range []string{"net", "uts", "ipc", "pid"} {
		if nsLink(t, ctrPid, ns) != nsLink(t, pause, ns) {
			t.Errorf("container is not in pause's %s namespace", ns)
		}
	}
	if r := e.exec(id, 10, "ps", "-o", "pid,comm"); !strings.Contains(string(r.Stdout), "pause") {
		t.Errorf("pause not visible in the shared PID namespace:\n%s", r.Stdout)
	}
	list, err := e.d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(list.Containers) != 1 || list.Containers[0].Id != id {
		t.Errorf("ListContainers shows %v, %v; want only the app container", list.GetContainers(), err)
	}
	if _, err := e.d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: pod}); err == nil {
		t.Error("the infra container answers ContainerStatus")
	}

	// Berth dies; pause and the container go on, and are found again.
	e.d.Kill()
	if framework.ParentPID(t, pause) != mon {
		t.Error("pause lost its monitor parent with berth")
	}
	e.d.Restart()
	if state, pid := e.podStatus(pod); state != runtimeapi.PodSandboxState_SANDBOX_READY || pid != pause {
		t.Fatalf("after restart: pod %v pause %d, want ready with %d", state, pid, pause)
	}

	ctx = framework.Ctx(t)
	if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, pid := range []int{pause, ctrPid, mon} {
		for deadline := time.Now().Add(5 * time.Second); framework.Running(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still runs after StopPodSandbox", pid)
			}
		}
	}
	if _, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	var left []string
	for _, root := range []string{e.d.State, e.d.Root} {
		filepath.WalkDir(root, func(p string, de os.DirEntry, err error) error {
			if err == nil && strings.Contains(de.Name(), pod[:16]) {
				left = append(left, p)
			}
			return nil
		})
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), pod) {
		left = append(left, "a mount")
	}
	if len(left) > 0 {
		t.Errorf("left after remove: %v", left)
	}

	// The image is there now: the next pod does not pull it again, and
	// a pod whose pause image cannot start fails cleanly is covered by
	// the sandbox tests.
	pod2 := e.runPod(e.podConfig("second"))
	if state, _ := e.podStatus(pod2); state != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("second pod: %v", state)
	}
}

func statusLine(t *testing.T, pid int, key string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func nsenter(t *testing.T, pid int, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(pid)}, args...)...).CombinedOutput()
	if err != nil {
		t.Errorf("nsenter %v: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func nsLink(t *testing.T, pid int, ns string) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPauseImageMissing: a sandbox image that cannot be pulled fails
// RunPodSandbox with the registry's answer and leaves nothing behind.
func TestPauseImageMissing(t *testing.T) {
	reg := framework.TestRegistry(t)
	e := newEnv(t, framework.WithConfig(fmt.Sprintf("pause_image = %q\n", reg+"/berth-test/no-such-pause:1")))
	_, err := e.d.Runtime.RunPodSandbox(framework.Ctx(t), &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("nopause")})
	if err == nil || !strings.Contains(err.Error(), "no-such-pause") {
		t.Fatalf("RunPodSandbox = %v, want the pull's failure naming the image", err)
	}
	for _, dir := range []string{"sandboxes", "netns", "monitors", "containers", "container-records", "runc"} {
		if entries, _ := os.ReadDir(filepath.Join(e.d.State, dir)); len(entries) != 0 {
			var names []string
			for _, en := range entries {
				names = append(names, en.Name())
			}
			t.Errorf("%s left: %v", dir, names)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(e.d.Root, "containers")); len(entries) != 0 {
		t.Errorf("writable layers left: %v", entries)
	}
}
