package container_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/test/framework"
)

// criuWorks tells whether CRIU works on this host, by the check berth
// makes: "criu check".
func criuWorks(t *testing.T) bool {
	bin, err := exec.LookPath("criu")
	if err != nil {
		t.Logf("criu not on PATH: checkpoints must be refused")
		return false
	}
	out, err := exec.Command(bin, "check").CombinedOutput()
	if err != nil {
		t.Logf("criu check fails (%v): checkpoints must be refused:\n%s", err, out)
		return false
	}
	return true
}

// TestCheckpointContainer checkpoints a running container (CheckpointContainer,
// KEP-2008): where CRIU works, the archive at the location holds CRI-O's
// layout and the container runs on; where it does not, berth answers
// Unknown with the text the kubelet skips on and writes nothing.
func TestCheckpointContainer(t *testing.T) {
	works := criuWorks(t)
	e := newEnv(t)
	ctx := framework.Ctx(t)
	podCfg := e.podConfig("ckpt")
	pod := e.runPod(podCfg)
	id := e.run(pod, podCfg, e.ctrConfig("ticker",
		`echo written > /data.txt; rm /etc/group; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done`))
	logPath := e.status(id).LogPath
	waitLog(t, logPath, "tick 3")
	done := e.run(pod, podCfg, e.ctrConfig("done", "true"))
	e.waitExit(done, 20*time.Second)

	out := t.TempDir()
	location := filepath.Join(out, "ckpt.tar")
	checkpoint := func(id, location string) error {
		_, err := e.d.Runtime.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: location, Timeout: 60})
		return err
	}
	for _, tc := range []struct {
		name, id, location string
		code               codes.Code
		want               string
	}{
		{"unknown container", "nope", location, codes.NotFound, "nope"},
		{"no location", id, "", codes.InvalidArgument, "location"},
		{"relative location", id, "ckpt.tar", codes.InvalidArgument, "location"},
		{"location in a missing directory", id, filepath.Join(out, "missing", "ckpt.tar"), codes.InvalidArgument, "location"},
		{"exited container", done, location, codes.FailedPrecondition, "not running"},
	} {
		if err := checkpoint(tc.id, tc.location); status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s naming %q", tc.name, err, tc.code, tc.want)
		}
	}

	err := checkpoint(id, location)
	if works {
		if err != nil {
			t.Fatalf("CheckpointContainer: %v", err)
		}
		checkArchive(t, location, id, "ticker")
	} else {
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "checkpoint/restore support not available" {
			t.Fatalf("CheckpointContainer without a working CRIU: %v, want Unknown %q", err, "checkpoint/restore support not available")
		}
		if entries, err := os.ReadDir(out); err != nil || len(entries) != 0 {
			t.Errorf("refused checkpoint left %v in the location's directory (%v)", entries, err)
		}
		// Where CRIU is there and fails its check, the spawn helper's
		// own dump (past berth's probe) still writes what it writes
		// before CRIU runs; without CRIU, libcontainer stops before.
		if _, err := exec.LookPath("criu"); err == nil {
			dumpPastProbe(t, e, id)
		}
	}
	// Nothing of the work is left in berth's root.
	if entries, err := os.ReadDir(filepath.Join(e.d.Root, "checkpoints")); err != nil || len(entries) != 0 {
		t.Errorf("work directories left: %v (%v)", entries, err)
	}
	// The container runs on and logs on.
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the checkpoint: %v", st)
	}
	before := strings.Count(logText(t, logPath), "tick ")
	for deadline := time.Now().Add(10 * time.Second); strings.Count(logText(t, logPath), "tick ") < before+5; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("container logs no more after the checkpoint: %d ticks, then none", before)
		}
	}
}

// checkArchive checks the checkpoint archive of container id, named
// name: what the kubelet's e2e test wants (spec.dump, config.dump,
// checkpoint/inventory.img) and the rest of CRI-O's layout.
func checkArchive(t *testing.T, location, id, name string) {
	t.Helper()
	f, err := os.Open(location)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	for _, name := range []string{"spec.dump", "config.dump", "checkpoint/inventory.img", "checkpoint/descriptors.json", "rootfs-diff.tar", "dump.log", "deleted.files"} {
		if _, ok := files[name]; !ok {
			t.Errorf("archive lacks %s", name)
		}
	}
	var cfg struct {
		ID, Name string
	}
	if err := json.Unmarshal(files["config.dump"], &cfg); err != nil || cfg.ID != id || cfg.Name != name {
		t.Errorf("config.dump: %s (%v)", files["config.dump"], err)
	}
	var spec struct {
		OCIVersion string `json:"ociVersion"`
	}
	if err := json.Unmarshal(files["spec.dump"], &spec); err != nil || spec.OCIVersion == "" {
		t.Errorf("spec.dump: %.200s (%v)", files["spec.dump"], err)
	}
	var deleted []string
	if err := json.Unmarshal(files["deleted.files"], &deleted); err != nil || !strings.Contains(strings.Join(deleted, " "), "etc/group") {
		t.Errorf("deleted.files: %s (%v), want etc/group", files["deleted.files"], err)
	}
	diff := tar.NewReader(bytes.NewReader(files["rootfs-diff.tar"]))
	for {
		h, err := diff.Next()
		if err != nil {
			t.Errorf("rootfs-diff.tar lacks data.txt (%v)", err)
			return
		}
		if h.Name == "data.txt" {
			return
		}
	}
}

// dumpPastProbe runs the dump berth's probe refused: the spawn helper, on
// the container's libcontainer state, gets as far as CRIU and reports its
// failure, and the container is left running (checked by the caller).
func dumpPastProbe(t *testing.T, e *env, id string) {
	t.Helper()
	work := t.TempDir()
	bin := filepath.Join(filepath.Dir(framework.Binary(t)), monitor.SpawnBinary)
	err := monitor.RunSpawn(framework.Ctx(t), bin, &monitor.SpawnRequest{Op: monitor.SpawnCheckpoint,
		Root: filepath.Join(e.d.State, "runc"), ID: id, ImagesDir: filepath.Join(work, "checkpoint"), WorkDir: work})
	t.Logf("the helper's dump past the probe: %v", err)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "criu") {
		t.Errorf("the helper's dump where criu check fails: %v, want CRIU's failure", err)
	}
	if log, err := os.ReadFile(filepath.Join(work, "dump.log")); err == nil {
		t.Logf("CRIU's dump.log:\n%s", log)
	}
	// Written before CRIU runs: the container's stdio as a restore must
	// replace them, stdout and stderr the pod process's pipes.
	var fds []string
	data, err := os.ReadFile(filepath.Join(work, "checkpoint", "descriptors.json"))
	if err == nil {
		err = json.Unmarshal(data, &fds)
	}
	if err != nil || len(fds) != 3 || !strings.HasPrefix(fds[1], "pipe:") || !strings.HasPrefix(fds[2], "pipe:") {
		t.Errorf("descriptors.json: %s (%v), want stdin, then stdout and stderr pipes", data, err)
	}
}
