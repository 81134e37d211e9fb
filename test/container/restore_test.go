package container_test

import (
	"archive/tar"
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

// counter counts into its log and into /count.txt of its rootfs, after
// changing its writable layer (a file written, one deleted).
const counter = `echo written > /data.txt; rm /etc/group; i=0; while true; do echo tick $i; echo $i > /count.txt; i=$((i+1)); sleep 0.1; done`

var tickRE = regexp.MustCompile(`tick (\d+)`)

// ticks are the counter's values in a log, in order.
func ticks(text string) []int {
	var out []int
	for _, m := range tickRE.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// TestRestoreContainer restores a checkpointed container into a new pod
// (CreateContainer whose image is the archive's path, KEP-2008 as CRI-O
// does it): where CRIU works, the counter goes on from where it was, in
// the new pod's network namespace, as the pod process's child, with its
// writable layer; bad archives are refused as InvalidArgument everywhere,
// and where CRIU does not work a good one is refused as a checkpoint is.
func TestRestoreContainer(t *testing.T) {
	works := criuWorks(t)
	// Only the C pod process restores, whichever kind the suite runs.
	e := newEnv(t, framework.WithArgs("--pod-process", "podproc"))
	ctx := framework.Ctx(t)
	dir := t.TempDir()
	create := func(pod string, podCfg *runtimeapi.PodSandboxConfig, image string) (string, error) {
		cfg := e.ctrConfig("restored", "echo not restored")
		cfg.Image = &runtimeapi.ImageSpec{Image: image}
		resp, err := e.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
		return resp.GetContainerId(), err
	}
	newPodCfg := e.podConfig("restored")
	newPod := e.runPod(newPodCfg)
	refuseBadArchives(t, e, dir, func(image string) (string, error) { return create(newPod, newPodCfg, image) })
	if !works {
		location := writeArchive(t, filepath.Join(dir, "fake.tar"), fakeCheckpoint(e.image))
		_, err := create(newPod, newPodCfg, location)
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "checkpoint/restore support not available" {
			t.Fatalf("CreateContainer from an archive without a working CRIU: %v, want Unknown %q", err, "checkpoint/restore support not available")
		}
		noContainers(t, e, newPod)
		return
	}
	// An archive of an image this node does not have.
	missing := writeArchive(t, filepath.Join(dir, "missing-image.tar"), fakeCheckpoint(e.image+"-missing"))
	if _, err := create(newPod, newPodCfg, missing); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "pull it first") {
		t.Errorf("CreateContainer from an archive of a missing image: %v, want NotFound saying to pull it", err)
	}
	noContainers(t, e, newPod)

	// The original, in a pod removed before the restore.
	oldPodCfg := e.podConfig("ckpt")
	oldPod := e.runPod(oldPodCfg)
	orig := e.run(oldPod, oldPodCfg, e.ctrConfig("ticker", counter))
	waitLog(t, e.status(orig).LogPath, "tick 5")
	_, pausePid := e.podStatus(oldPod)
	oldNetNS := nsOf(t, pausePid, "net")
	seen := ticks(logText(t, e.status(orig).LogPath))
	before := seen[len(seen)-1]
	location := filepath.Join(dir, "ckpt.tar")
	if _, err := e.d.Runtime.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: orig, Location: location, Timeout: 60}); err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}
	if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: oldPod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: oldPod}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}

	id, err := create(newPod, newPodCfg, location)
	if err != nil {
		t.Fatalf("CreateContainer from %s: %v", location, err)
	}
	st := e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Metadata.Name != "restored" || st.Labels["name"] != "restored" ||
		st.LogPath != filepath.Join(newPodCfg.LogDirectory, "restored.log") || !strings.Contains(st.Image.GetImage(), "busybox") {
		t.Fatalf("created from the archive: %v", st)
	}
	start := time.Now()
	e.start(id)
	t.Logf("restore took %s", time.Since(start))
	checkRestored(t, e, newPod, id, oldNetNS, before)

	// Stop and remove leave nothing of it.
	if _, err := e.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("after StopContainer: %v", st)
	}
	if _, err := e.d.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	noContainers(t, e, newPod)
	for _, d := range []string{filepath.Join(e.d.State, "containers", id), filepath.Join(e.d.Root, "containers", id), filepath.Join(e.d.State, "runc", id)} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s left after RemoveContainer (%v)", d, err)
		}
	}
	if _, err := os.Stat(location); err != nil {
		t.Errorf("the archive, the user's, is gone: %v", err)
	}
}

// TestRestoreInGoMonitorPod: a pod whose process is the Go monitor
// cannot restore, and says so (FailedPrecondition) before anything is
// made, whether CRIU works or not.
func TestRestoreInGoMonitorPod(t *testing.T) {
	e := newEnv(t, framework.WithArgs("--pod-process", "monitor"))
	podCfg := e.podConfig("gomon")
	pod := e.runPod(podCfg)
	cfg := e.ctrConfig("restored", "true")
	cfg.Image = &runtimeapi.ImageSpec{Image: writeArchive(t, filepath.Join(t.TempDir(), "ckpt.tar"), fakeCheckpoint(e.image))}
	_, err := e.d.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "Go monitor") {
		t.Fatalf("CreateContainer from an archive in a Go monitor pod: %v, want FailedPrecondition naming the Go monitor", err)
	}
	noContainers(t, e, pod)
}

// checkRestored checks the restored container id of pod: running in the
// pod's network namespace (not oldNetNS), the pod process's child,
// counting on from above before into its new log, its layer restored.
func checkRestored(t *testing.T, e *env, pod, id, oldNetNS string, before int) {
	t.Helper()
	st := e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after StartContainer: %v", st)
	}
	pid := e.containerPid(id)
	_, pausePid := e.podStatus(pod)
	if got, want := nsOf(t, pid, "net"), nsOf(t, pausePid, "net"); got != want || got == oldNetNS {
		t.Errorf("restored process in netns %s, want the new pod's %s (the old pod's was %s)", got, want, oldNetNS)
	}
	if got, want := ppidOf(t, pid), ppidOf(t, pausePid); got != want {
		t.Errorf("restored process's parent is %d, want the pod process %d (pause's parent)", got, want)
	}
	text := waitLog(t, st.LogPath, "tick ")
	for deadline := time.Now().Add(10 * time.Second); len(ticks(text)) < 3 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		text = logText(t, st.LogPath)
	}
	got := ticks(text)
	if len(got) < 3 || got[0] <= before {
		t.Fatalf("restored log's ticks %v: want them to go on from above %d, the last before the checkpoint", got, before)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("restored log's ticks %v: not one counter going on", got)
		}
	}
	t.Logf("last tick before the checkpoint %d; the restored container counts on from %d", before, got[0])
	if r := e.exec(id, 10, "cat", "/data.txt"); strings.TrimSpace(string(r.Stdout)) != "written" {
		t.Errorf("/data.txt in the restored rootfs: %q %q (exit %d)", r.Stdout, r.Stderr, r.ExitCode)
	}
	if r := e.exec(id, 10, "cat", "/count.txt"); r.ExitCode != 0 {
		t.Errorf("/count.txt in the restored rootfs: exit %d %q", r.ExitCode, r.Stderr)
	} else if n, _ := strconv.Atoi(strings.TrimSpace(string(r.Stdout))); n <= before {
		t.Errorf("/count.txt is %q, want above %d", r.Stdout, before)
	}
	if r := e.exec(id, 10, "test", "-e", "/etc/group"); r.ExitCode == 0 {
		t.Errorf("/etc/group, deleted before the checkpoint, is back")
	}
}

// refuseBadArchives has create (CreateContainer with an image) refuse
// archives that are not checkpoints berth can restore, InvalidArgument
// naming the problem, leaving no container.
func refuseBadArchives(t *testing.T, e *env, dir string, create func(string) (string, error)) {
	t.Helper()
	good := fakeCheckpoint(e.image)
	for _, tc := range []struct {
		name    string
		entries map[string]string
		want    string
	}{
		{"no config.dump", withoutEntry(good, "config.dump"), "config.dump: missing"},
		{"no spec.dump", withoutEntry(good, "spec.dump"), "spec.dump: missing"},
		{"no checkpoint dir", withoutEntry(withoutEntry(good, "checkpoint/inventory.img"), "checkpoint/descriptors.json"), "checkpoint/inventory.img: missing"},
		{"path traversal", withEntry(good, "../../etc/cron.d/evil", "x"), "leaves the archive's directory"},
		{"path traversal in the rootfs diff", withEntry(good, "rootfs-diff.tar", tarText(t, map[string]string{"../../../tmp/evil": "x"})), "rootfs-diff.tar"},
	} {
		location := writeArchive(t, filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".tar"), tc.entries)
		id, err := create(location)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), location) {
			t.Errorf("%s: CreateContainer = %q, %v; want InvalidArgument naming the archive and %q", tc.name, id, err, tc.want)
		}
	}
	if _, err := os.Lstat("/tmp/evil"); err == nil {
		t.Errorf("/tmp/evil written by an archive's rootfs diff")
	}
}

// fakeCheckpoint is an archive of CRI-O's layout that CRIU never wrote,
// of a container of image.
func fakeCheckpoint(image string) map[string]string {
	return map[string]string{
		"config.dump":                 `{"id":"0123","name":"ticker","rootfsImage":"` + image + `","rootfsImageName":"` + image + `","runtime":"berth"}`,
		"spec.dump":                   `{"ociVersion":"1.2.0"}`,
		"checkpoint/inventory.img":    "not really",
		"checkpoint/descriptors.json": `["/dev/null","pipe:[1]","pipe:[2]"]`,
	}
}

func withoutEntry(m map[string]string, name string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != name {
			out[k] = v
		}
	}
	return out
}

func withEntry(m map[string]string, name, body string) map[string]string {
	out := withoutEntry(m, name)
	out[name] = body
	return out
}

func tarText(t *testing.T, files map[string]string) string {
	t.Helper()
	var b strings.Builder
	tw := tar.NewWriter(&b)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func writeArchive(t *testing.T, path string, files map[string]string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(tarText(t, files)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// noContainers checks that the pod has no container.
func noContainers(t *testing.T, e *env, pod string) {
	t.Helper()
	resp, err := e.d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod}})
	if err != nil || len(resp.Containers) != 0 {
		t.Errorf("containers of pod %s: %v (%v), want none", pod, resp.GetContainers(), err)
	}
}

func nsOf(t *testing.T, pid int, ns string) string {
	t.Helper()
	link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", ns))
	if err != nil {
		t.Fatalf("namespace of %d: %v", pid, err)
	}
	return link
}

func ppidOf(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	// The fields after the command, which ends at the last ')'.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
