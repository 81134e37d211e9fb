package container_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestCheckpointPod checkpoints a pod of two counting containers
// (CheckpointPod, cri-api v0.37) and restores it into a new pod
// (RestorePod): where CRIU works, both counters go on from where they
// were, in the new pod, and the checkpointed pod ran on meanwhile; bad
// requests are refused everywhere naming the problem, leaving nothing;
// where CRIU does not work, both calls answer as CheckpointContainer
// does and nothing is left.
func TestCheckpointPod(t *testing.T) {
	works := criuWorks(t)
	e := newEnv(t, framework.WithArgs("--pod-process", "podproc"))
	ctx := framework.Ctx(t)
	podCfg := e.podConfig("ckpt-pod")
	pod := e.runPod(podCfg)
	a := e.run(pod, podCfg, e.ctrConfig("a", counter))
	b := e.run(pod, podCfg, e.ctrConfig("b", counter))
	done := e.run(pod, podCfg, e.ctrConfig("done", "true"))
	e.waitExit(done, 20*time.Second)
	otherCfg := e.podConfig("other")
	other := e.runPod(otherCfg)
	stranger := e.run(other, otherCfg, e.ctrConfig("stranger", "sleep 1000"))
	waitLog(t, e.status(a).LogPath, "tick 5")
	waitLog(t, e.status(b).LogPath, "tick 5")

	out := t.TempDir()
	full := t.TempDir()
	writeArchive(t, filepath.Join(full, "x.tar"), fakeCheckpoint(e.image))
	checkpoint := func(pod, dir string, opts map[string]string, ids ...string) error {
		_, err := e.d.Runtime.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: dir, ContainerIds: ids, Options: opts})
		return err
	}
	for _, tc := range []struct {
		name, pod, dir string
		opts           map[string]string
		ids            []string
		code           codes.Code
		want           string
	}{
		{"unknown pod", "nope", out, nil, []string{a}, codes.NotFound, "nope"},
		{"no output path", pod, "", nil, []string{a}, codes.InvalidArgument, "output_path: required"},
		{"missing output path", pod, filepath.Join(out, "missing"), nil, []string{a}, codes.InvalidArgument, "not a directory that exists"},
		{"output path not empty", pod, full, nil, []string{a}, codes.InvalidArgument, "not empty"},
		{"no containers", pod, out, nil, nil, codes.InvalidArgument, "container_ids: empty"},
		{"a container twice", pod, out, nil, []string{a, b, a}, codes.InvalidArgument, "named twice"},
		{"another pod's container", pod, out, nil, []string{a, stranger}, codes.InvalidArgument, "of pod sandbox " + other},
		{"an exited container", pod, out, nil, []string{a, done}, codes.FailedPrecondition, "not running"},
		{"options", pod, out, map[string]string{"tcp-established": "true"}, []string{a}, codes.InvalidArgument, "options"},
	} {
		if err := checkpoint(tc.pod, tc.dir, tc.opts, tc.ids...); status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckpointPod, %s: %v, want %s naming %q", tc.name, err, tc.code, tc.want)
		}
	}
	emptyDir(t, out)

	newPodCfg := e.podConfig("restored-pod")
	restore := func(dir string, cfgs ...*runtimeapi.ContainerConfig) (*runtimeapi.RestorePodResponse, error) {
		return e.d.Runtime.RestorePod(ctx, &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: newPodCfg, ContainerConfigs: cfgs})
	}
	pods := podIDs(t, e)
	if !works {
		if err := checkpoint(pod, out, nil, a, b); status.Code(err) != codes.Unknown || status.Convert(err).Message() != "checkpoint/restore support not available" {
			t.Fatalf("CheckpointPod without a working CRIU: %v, want Unknown %q", err, "checkpoint/restore support not available")
		}
		emptyDir(t, out)
		// Refused before the pod is made: no pod, and no CNI ADD.
		fake := writeFakePodCheckpoint(t, e, "a", "b")
		added := lastReserved(t, e)
		_, err := restore(fake, e.ctrConfig("a", counter), e.ctrConfig("b", counter))
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "checkpoint/restore support not available" {
			t.Errorf("RestorePod without a working CRIU: %v, want Unknown %q", err, "checkpoint/restore support not available")
		}
		if got := podIDs(t, e); !slices.Equal(got, pods) {
			t.Errorf("a failed RestorePod left pods: %v, before %v", got, pods)
		}
		if got := lastReserved(t, e); got != added {
			t.Errorf("a RestorePod refused for want of CRIU ran a CNI ADD: host-local last gave %s, before %s", got, added)
		}
		return
	}

	// The old pod runs on until the end: its network namespace's inode
	// number, freed, could come back as the new pod's.
	_, pausePid := e.podStatus(pod)
	oldNetNS := nsOf(t, pausePid, "net")
	last := map[string]int{}
	for name, id := range map[string]string{"a": a, "b": b} {
		seen := ticks(logText(t, e.status(id).LogPath))
		last[name] = seen[len(seen)-1]
	}
	start := time.Now()
	if err := checkpoint(pod, out, nil, a, b); err != nil {
		t.Fatalf("CheckpointPod: %v", err)
	}
	t.Logf("CheckpointPod of 2 containers took %s", time.Since(start))
	for name, id := range map[string]string{"a": a, "b": b} {
		checkArchive(t, filepath.Join(out, id+".tar"), id, name)
		// Thawed: the checkpointed pod runs on.
		seen := ticks(logText(t, e.status(id).LogPath))
		waitLog(t, e.status(id).LogPath, "tick "+strconv.Itoa(seen[len(seen)-1]+3))
	}
	if _, err := os.Stat(filepath.Join(out, "pod.json")); err != nil {
		t.Errorf("pod.json: %v", err)
	}

	// A restore that does not match the checkpoint makes nothing.
	pods = podIDs(t, e)
	if _, err := restore(out, e.ctrConfig("a", counter)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1 configs for the checkpoint's 2") {
		t.Errorf("RestorePod of one of two containers: %v, want InvalidArgument", err)
	}
	if got := podIDs(t, e); !slices.Equal(got, pods) {
		t.Errorf("a refused RestorePod left pods: %v, before %v", got, pods)
	}

	start = time.Now()
	resp, err := restore(out, e.ctrConfig("b", "echo not restored"), e.ctrConfig("a", "echo not restored"))
	if err != nil {
		t.Fatalf("RestorePod: %v", err)
	}
	t.Logf("RestorePod took %s", time.Since(start))
	if len(resp.RestoredContainers) != 2 || resp.RestoredContainers[0].Name != "b" || resp.RestoredContainers[1].Name != "a" {
		t.Fatalf("RestorePod answered %v, want b and a", resp)
	}
	for _, rc := range resp.RestoredContainers {
		if st := e.status(rc.ContainerId); st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Metadata.Name != rc.Name {
			t.Fatalf("restored container %s before its start: %v", rc.Name, st)
		}
	}
	for _, rc := range resp.RestoredContainers {
		start = time.Now()
		e.start(rc.ContainerId)
		t.Logf("StartContainer of restored %s took %s", rc.Name, time.Since(start))
	}
	for _, rc := range resp.RestoredContainers {
		checkRestored(t, e, resp.PodSandboxId, rc.ContainerId, oldNetNS, last[rc.Name])
	}
	e.removePod(resp.PodSandboxId)
	e.removePod(pod)
}

// removePod stops and removes a pod with its containers.
func (e *env) removePod(id string) {
	e.t.Helper()
	ctx := framework.Ctx(e.t)
	if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		e.t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		e.t.Fatalf("RemovePodSandbox: %v", err)
	}
}

// writeFakePodCheckpoint writes a pod checkpoint of containers names
// that CRIU never wrote.
func writeFakePodCheckpoint(t *testing.T, e *env, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	var entries []string
	for _, n := range names {
		writeArchive(t, filepath.Join(dir, n+".tar"), fakeCheckpoint(e.image))
		entries = append(entries, `{"name":"`+n+`","id":"`+n+`","archive":"`+n+`.tar","image":"`+e.image+`"}`)
	}
	manifest := `{"version":1,"podId":"gone","containers":[` + strings.Join(entries, ",") + `]}`
	if err := os.WriteFile(filepath.Join(dir, "pod.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// emptyDir checks that dir holds nothing.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("%s holds %v (%v), want nothing", dir, entries, err)
	}
}

// lastReserved is the address host-local last gave in e's network: a
// CNI ADD moves it on, its DEL leaves it.
func lastReserved(t *testing.T, e *env) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.net.DataDir, e.net.Name, "last_reserved_ip.0"))
	if err != nil {
		t.Fatalf("host-local's last reserved address: %v", err)
	}
	return strings.TrimSpace(string(data))
}

// podIDs are the daemon's pods, sorted.
func podIDs(t *testing.T, e *env) []string {
	t.Helper()
	resp, err := e.d.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	var ids []string
	for _, p := range resp.Items {
		ids = append(ids, p.Id)
	}
	slices.Sort(ids)
	return ids
}
