package faults_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestDiskFullPull: an image bigger than the disk (berth-test/big, 5 x 20
// MiB that do not compress) fails to pull with an error that says the
// disk is full, and leaves nothing of itself: no image listed, no blob,
// layer or temp file, the space given back. A small image pulls fine
// afterwards.
func TestDiskFullPull(t *testing.T) {
	e, disk := newDiskEnv(t, "faults-diskpull", "30m")
	big := framework.TestRegistry(t) + "/berth-test/big:latest"
	before := framework.SnapshotHost(t, e.Scope())
	used := diskUsed(t, disk)

	ctx := framework.Ctx(t)
	_, err := e.D.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: big}})
	if err == nil {
		t.Fatalf("pulled %s (100 MiB) onto a 30 MiB disk", big)
	}
	t.Logf("PullImage %s: %v", big, err)
	if code := status.Code(err); code != codes.ResourceExhausted || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("pull onto a full disk: code %s, %q; want ResourceExhausted naming 'no space left on device'", code, err)
	}
	imgs, err := e.D.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(imgs.Images) != 0 {
		t.Errorf("ListImages after a failed pull: %v (%v), want none", imgs.GetImages(), err)
	}
	framework.CheckHost(t, before)
	if now := diskUsed(t, disk); now > used+1<<20 {
		t.Errorf("disk use after the failed pull: %d bytes, %d before", now, used)
	}

	pull(t, e.D, e.Image)
	pod, cfg := e.RunPod("afterfull")
	id := e.Run(pod, cfg, "c", "echo ok", nil)
	if st := e.WaitExit(id, settle); st.ExitCode != 0 {
		t.Errorf("container from an image pulled after the failed pull: exit %d (%s)", st.ExitCode, st.Message)
	}
	stopAndRemove(e, pod)
}

// TestDiskFullContainerWrites: a container fills the disk that holds
// berth's root and state (records, writable layers) and the pod's logs,
// while another keeps logging. berth and the monitor carry on; calls
// made meanwhile succeed or fail cleanly; a SIGKILLed berth restarts on
// the full disk with every record loaded (none moved aside as corrupt)
// and every container in its state; once the filler is removed the pod
// works again, and its removal leaves nothing.
func TestDiskFullContainerWrites(t *testing.T) {
	e, disk := newDiskEnv(t, "faults-diskw", "40m")
	pull(t, e.D, e.Image)
	before := framework.SnapshotHost(t, e.Scope())
	logs := filepath.Join(disk, "logs")
	pod, cfg := e.RunPodWith("filler", func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = logs })

	keeper := e.Run(pod, cfg, "keeper", "exec sleep 100000", nil)
	done := e.Run(pod, cfg, "done", "echo bye", nil)
	e.WaitExit(done, settle)
	talker := e.Run(pod, cfg, "talker", "while :; do seq 1 200; sleep 1; done", nil)
	quiet := e.Run(pod, cfg, "quiet", "exec sleep 100000", nil)
	// Created now, started once the disk is full.
	pending, err := e.D.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, SandboxConfig: cfg, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "pending"}, Image: &runtimeapi.ImageSpec{Image: e.Image},
		Command: []string{"sleep", "100000"}, LogPath: "pending.log",
	}})
	if err != nil {
		t.Fatalf("CreateContainer pending: %v", err)
	}
	// Filled from an exec, so that the disk is full only once every
	// container has started (a start whose record then cannot be written
	// fails, though its container runs).
	filler := e.Run(pod, cfg, "filler", "exec sleep 100000", nil)
	mon := framework.MonitorOf(t, pod, pausePid(e, pod))
	fill, err := e.D.Runtime.ExecSync(framework.Ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: filler, Timeout: 60,
		Cmd: []string{"sh", "-c", "dd if=/dev/zero of=/fill bs=64k; echo dd: $?"}})
	if err != nil || !strings.Contains(string(fill.GetStderr()), "No space left on device") {
		t.Fatalf("dd in the filler: %v; stdout %q, stderr %q", err, fill.GetStdout(), fill.GetStderr())
	}
	if free := diskFree(t, disk); free > 64<<10 {
		t.Fatalf("the filler's dd ended with %d bytes free", free)
	}
	t.Logf("disk full: %d bytes free", diskFree(t, disk))

	want := map[string]runtimeapi.ContainerState{
		keeper:              runtimeapi.ContainerState_CONTAINER_RUNNING,
		done:                runtimeapi.ContainerState_CONTAINER_EXITED,
		talker:              runtimeapi.ContainerState_CONTAINER_RUNNING,
		quiet:               runtimeapi.ContainerState_CONTAINER_RUNNING,
		pending.ContainerId: runtimeapi.ContainerState_CONTAINER_CREATED,
		filler:              runtimeapi.ContainerState_CONTAINER_RUNNING,
	}
	checkStates := func(when string) {
		t.Helper()
		got := listed(e)
		for id, st := range want {
			if got[id] != st {
				t.Errorf("%s: ListContainers has %s %s, want %s", when, id[:12], got[id], st)
			}
			if s := containerState(e, id); s.State != st {
				t.Errorf("%s: ContainerStatus of %s is %s, want %s", when, id[:12], s.State, st)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d containers listed, want %d", when, len(got), len(want))
		}
		if !e.D.Running() || !framework.Running(mon) {
			t.Fatalf("%s: berth running %v, monitor running %v", when, e.D.Running(), framework.Running(mon))
		}
	}
	checkStates("disk full")
	checkMountNS(t, mon)

	// A create on the full disk may fail; if it does, it says why and
	// leaves nothing listed.
	ctx := framework.Ctx(t)
	resp, err := e.D.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, SandboxConfig: cfg, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "late"}, Image: &runtimeapi.ImageSpec{Image: e.Image},
		Command: []string{"true"}, LogPath: "late.log",
	}})
	if err == nil {
		t.Logf("CreateContainer on the full disk succeeded")
		want[resp.ContainerId] = runtimeapi.ContainerState_CONTAINER_CREATED
	} else {
		t.Logf("CreateContainer on the full disk: %v", err)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("CreateContainer on a full disk: %v; want ResourceExhausted, the reason named", err)
		}
	}

	// A start on the full disk starts the container, though berth cannot
	// write it down: the call says so, and so does the status.
	if _, err := e.D.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: pending.ContainerId}); err != nil {
		t.Errorf("StartContainer on the full disk: %v", err)
	}
	if st := containerState(e, pending.ContainerId); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container started on the full disk is %s", st.State)
	}
	want[pending.ContainerId] = runtimeapi.ContainerState_CONTAINER_RUNNING

	// A container is stopped and removed while the disk is full: its exit
	// must still be reported.
	if _, err := e.D.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: quiet, Timeout: 5}); err != nil {
		t.Errorf("StopContainer on the full disk: %v", err)
	}
	if st := e.WaitExit(quiet, settle); st.ExitCode != 137 && st.ExitCode != 143 {
		t.Errorf("quiet stopped on the full disk: exit %d (%s %s), want 137 or 143", st.ExitCode, st.Reason, st.Message)
	}
	if _, err := e.D.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: quiet}); err != nil {
		t.Errorf("RemoveContainer on the full disk: %v", err)
	}
	delete(want, quiet)
	checkStates("quiet removed")

	t.Logf("berth killed and restarted with %d bytes free", diskFree(t, disk))
	e.D.Kill()
	e.D.Restart()
	if bad := corruptRecords(t, disk); len(bad) > 0 {
		t.Errorf("records moved aside as corrupt after a restart on the full disk: %v", bad)
	}
	checkStates("berth restarted on the full disk")
	waitPodState(e, pod, runtimeapi.PodSandboxState_SANDBOX_READY)
	if st := containerState(e, done); st.ExitCode != 0 || st.Reason != "Completed" {
		t.Errorf("exited container after the restart: exit %d, reason %q", st.ExitCode, st.Reason)
	}

	// Space comes back with the filler's writable layer.
	ctx = framework.Ctx(t)
	if _, err := e.D.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: filler, Timeout: 5}); err != nil {
		t.Errorf("stop the filler: %v", err)
	}
	if _, err := e.D.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: filler}); err != nil {
		t.Errorf("remove the filler: %v", err)
	}
	// The overlay is unmounted lazily: its pages go once the kernel has
	// let go of the killed container's mount namespace, a moment later.
	for deadline := time.Now().Add(settle); diskFree(t, disk) < 20<<20; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d bytes free %s after the filler's removal (mount namespaces: monitor %s, host %s)", diskFree(t, disk), settle, mountNS(mon), mountNS(os.Getpid()))
		}
	}
	after := e.Run(pod, cfg, "after", "echo disk is back", nil)
	if st := e.WaitExit(after, settle); st.ExitCode != 0 {
		t.Errorf("container once space is back: exit %d (%s)", st.ExitCode, st.Message)
	}
	if b, err := os.ReadFile(filepath.Join(logs, "after.log")); err != nil || !strings.Contains(string(b), "disk is back") {
		t.Errorf("log once space is back: %q, %v", b, err)
	}
	checkLog(t, filepath.Join(logs, "talker.log"))
	stopAndRemove(e, pod)
	if bad := corruptRecords(t, disk); len(bad) > 0 {
		t.Errorf("records moved aside as corrupt: %v", bad)
	}
	framework.CheckHost(t, before)
}

// checkLog waits for the talker (seq 1 200, once a second) to log again
// now that the disk has room, and checks that every line of its log is a
// whole CRI record: what a full disk cost is lines, never a torn record
// (the kubelet would show a garbled line).
func checkLog(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("talker's log: %v", err)
	}
	for deadline := time.Now().Add(settle); ; time.Sleep(100 * time.Millisecond) {
		if now, err := os.Stat(path); err == nil && now.Size() > st.Size()+4096 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("talker's log %s did not grow within %s of the disk having room", path, settle)
			return
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	record := regexp.MustCompile(`^\S+ stdout F ([0-9]+)$`)
	var bad []string
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for _, line := range lines {
		m := record.FindStringSubmatch(line)
		if m == nil {
			bad = append(bad, line)
			continue
		}
		if n, err := strconv.Atoi(m[1]); err != nil || n < 1 || n > 200 {
			bad = append(bad, line)
		}
	}
	if len(bad) > 0 {
		t.Errorf("talker's log: %d of %d lines are not whole records, e.g. %q", len(bad), len(lines), bad[0])
	}
}
