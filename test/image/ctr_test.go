package image_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/berth-runtime/berth/test/framework"
)

// standIn runs berth-ctr (built beside berth) as argv0, the name kind
// calls it by in a node, with the daemon's socket as ctr's
// CONTAINERD_ADDRESS.
func standIn(t *testing.T, d *framework.Daemon, stdin []byte, argv0 string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(framework.Binary(t)), "berth-ctr"), args...)
	cmd.Args[0] = argv0
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if d != nil {
		cmd.Env = append(cmd.Env, "CONTAINERD_ADDRESS="+d.Socket)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %q: %v", argv0, args, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestCtrStandIn runs the command lines kind v0.33.0 runs in a node for
// kind load docker-image (pkg/cluster/nodeutils), against a daemon.
func TestCtrStandIn(t *testing.T) {
	reg := registry(t)
	d := framework.StartDaemon(t)

	// getSnapshotter: containerd config dump, parsed as kind does.
	out, stderr, code := standIn(t, nil, nil, "containerd", "config", "dump")
	if code != 0 {
		t.Fatalf("containerd config dump: exit %d %s", code, stderr)
	}
	var dump struct {
		Version int64
		Plugins map[string]map[string]any
	}
	if _, err := toml.Decode(out, &dump); err != nil {
		t.Fatalf("config dump is not TOML: %v\n%s", err, out)
	}
	snapshotter, _ := dump.Plugins["io.containerd.cri.v1.images"]["snapshotter"].(string)
	if dump.Version != 3 || snapshotter != "overlayfs" {
		t.Fatalf("config dump: version %d snapshotter %q\n%s", dump.Version, snapshotter, out)
	}

	// LoadImageArchive: a docker save archive on stdin.
	img := localImage(t, reg, "loaded by kind")
	id := configID(t, img)
	tag := "docker.io/library/kind-loaded:v1"
	archive := docker25Archive(t, tag, img)
	out, stderr, code = standIn(t, d, archive, "ctr", "--namespace=k8s.io", "images", "import", "--all-platforms", "--digests", "--snapshotter="+snapshotter, "-")
	if code != 0 || !strings.Contains(out, tag) {
		t.Fatalf("ctr images import: exit %d\n%s%s", code, out, stderr)
	}

	// ImageID: crictl inspecti's .status.id is Docker's image ID, the config digest.
	if st := status(t, d, tag); st.GetId() != id || st.GetPinned() {
		t.Fatalf("imported %s: id %s pinned %v, want %s", tag, st.GetId(), st.GetPinned(), id)
	}
	// kind runs crictl itself; where the test bed has none, the CRI
	// status above said the same.
	crictl := os.Getenv(framework.EnvCrictl)
	if m, _ := filepath.Glob("/var/cache/berth-dev/cri-tools-*/crictl"); crictl == "" && len(m) > 0 {
		crictl = m[0]
	}
	if crictl != "" {
		raw, err := exec.Command(crictl, "--runtime-endpoint", "unix://"+d.Socket, "inspecti", tag).Output()
		var inspect struct {
			Status struct {
				ID       string   `json:"id"`
				RepoTags []string `json:"repoTags"`
			} `json:"status"`
		}
		if err != nil || json.Unmarshal(raw, &inspect) != nil || inspect.Status.ID != id {
			t.Errorf("crictl inspecti %s: %v %s", tag, err, raw)
		}
	}

	// ReTagImage: the ID, to the name kind's sanitizeImage makes.
	retag := "docker.io/library/kind-loaded:retagged"
	out, stderr, code = standIn(t, d, nil, "ctr", "--namespace=k8s.io", "images", "tag", "--force", id, retag)
	if code != 0 || strings.TrimSpace(out) != retag {
		t.Fatalf("ctr images tag: exit %d\n%s%s", code, out, stderr)
	}
	if st := status(t, d, retag); st.GetId() != id {
		t.Errorf("%s names %s, want %s", retag, st.GetId(), id)
	}

	// kind's node image build pins with a label.
	pinned := localImage(t, reg, "pinned")
	out, stderr, code = standIn(t, d, docker25Archive(t, "registry.k8s.io/pinned:v1", pinned), "ctr", "--namespace=k8s.io", "images", "import", "--label=io.cri-containerd.pinned=pinned", "--all-platforms", "--digests", "-")
	if code != 0 || !status(t, d, "registry.k8s.io/pinned:v1").GetPinned() {
		t.Errorf("import with the pinned label: exit %d\n%s%s", code, out, stderr)
	}

	// Versions answer, honestly.
	for _, argv0 := range []string{"ctr", "containerd"} {
		out, _, code := standIn(t, nil, nil, argv0, "--version")
		if code != 0 || !strings.Contains(out, "berth") {
			t.Errorf("%s --version: exit %d %q", argv0, code, out)
		}
	}

	// Anything else is refused, saying so.
	for _, args := range [][]string{
		{"ctr", "--namespace=k8s.io", "images", "ls"},
		{"ctr", "--namespace=k8s.io", "containers", "list"},
		{"ctr", "--namespace=k8s.io", "images", "import", "--no-unpack", "-"},
		{"ctr", "--namespace=k8s.io", "images", "import", "--snapshotter=native", "-"},
		{"ctr", "images", "import", "-"},
		{"ctr", "--namespace=moby", "images", "tag", id, "x:1"},
		{"containerd"},
		{"containerd", "config", "default"},
	} {
		_, stderr, code := standIn(t, d, nil, args[0], args[1:]...)
		if code == 0 || !(strings.Contains(stderr, "does not implement") || strings.Contains(stderr, "namespace") || strings.Contains(stderr, "snapshotter")) {
			t.Errorf("%q: exit %d %q, want a refusal", args, code, stderr)
		}
	}
	_, stderr, code = standIn(t, d, nil, "ctr", "--namespace=k8s.io", "images", "ls")
	if !strings.Contains(stderr, "use crictl or berth") {
		t.Errorf("refusal says %q", stderr)
	}
}
