package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// localImage is busybox from the test registry with one more layer
// holding /greeting: an image as a user builds one with docker and loads
// with kind load.
func localImage(t *testing.T, reg, greeting string) v1.Image {
	t.Helper()
	ref, err := name.ParseReference(reg+"/library/busybox:latest", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	base, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("fetch busybox from the test registry: %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "greeting", Mode: 0o644, Size: int64(len(greeting)), ModTime: time.Unix(1, 0)})
	tw.Write([]byte(greeting))
	tw.Close()
	// From an opener, not a reader: LayerFromReader buffers into a temp
	// file of its own that nothing removes.
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func configID(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// dockerArchive writes img as go-containerregistry's docker save format.
func dockerArchive(t *testing.T, tag string, img v1.Image) string {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// docker25Archive is what docker save writes from Docker 25 on: an OCI
// layout with the image's name in index.json, and manifest.json.
func docker25Archive(t *testing.T, tag string, img v1.Image) []byte {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          tag,
		"org.opencontainers.image.ref.name": tag[strings.LastIndex(tag, ":")+1:],
	})); err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	var paths []string
	for _, l := range layers {
		d, _ := l.Digest()
		paths = append(paths, "blobs/sha256/"+d.Hex)
	}
	cfg, _ := img.ConfigName()
	mj, _ := json.Marshal([]map[string]any{{"Config": "blobs/sha256/" + cfg.Hex, "RepoTags": []string{tag}, "Layers": paths}})
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), mj, 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return buf.Bytes()
}

// berth runs the berth binary with stdin, returning stdout and failing
// the test if it fails.
func berthCmd(t *testing.T, stdin []byte, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, framework.Binary(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestImportThroughDaemon: berth images import against a running daemon,
// then a container runs from the imported image; the image's ID is its
// config digest, its tags the archive's, and it is reported pinned.
func TestImportThroughDaemon(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-import")
	d := e.D
	reg := framework.TestRegistry(t)
	img := localImage(t, reg, "hello from an imported image")
	id := configID(t, img)
	tag := "example.com/local/greeter:v1"
	archive := dockerArchive(t, tag, img)

	res := framework.RunBerth(t, "images", "import", "--config", d.ConfigPath, "--address", d.Socket, "--pinned", archive)
	if res.ExitCode != 0 {
		t.Fatalf("berth images import: exit %d\n%s", res.ExitCode, res.Stderr)
	}
	if want := id + " " + tag + "\n"; res.Stdout != want {
		t.Errorf("import printed %q, want %q", res.Stdout, want)
	}
	st := status(t, d, tag)
	if st.GetId() != id || !contains(st.GetRepoTags(), tag) || !st.GetPinned() {
		t.Fatalf("status of %s: id %s tags %v pinned %v; want id %s, pinned", tag, st.GetId(), st.GetRepoTags(), st.GetPinned(), id)
	}
	var listed *runtimeapi.Image
	for _, i := range list(t, d) {
		if i.GetId() == id {
			listed = i
		}
	}
	if listed == nil || !listed.GetPinned() {
		t.Errorf("ListImages: %v, want the imported image pinned", listed)
	}

	pod, podCfg := e.RunPod("imported")
	ctr := e.Run(pod, podCfg, "greeter", "cat /greeting", func(c *runtimeapi.ContainerConfig) {
		c.Image = &runtimeapi.ImageSpec{Image: tag}
	})
	if st := e.WaitExit(ctr, 30*time.Second); st.GetExitCode() != 0 {
		t.Fatalf("container of the imported image exited %d: %s", st.GetExitCode(), st.GetMessage())
	}
	logs, err := os.ReadFile(filepath.Join(podCfg.GetLogDirectory(), "greeter.log"))
	if err != nil || !strings.Contains(string(logs), "hello from an imported image") {
		t.Errorf("container log %q (%v)", logs, err)
	}

	// Tag through the daemon: a new name, then a taken one only with --force.
	res = framework.RunBerth(t, "images", "tag", "--config", d.ConfigPath, "--address", d.Socket, id[:19], "example.com/local/greeter:latest")
	if res.ExitCode != 0 || !contains(status(t, d, "example.com/local/greeter:latest").GetRepoTags(), tag) {
		t.Errorf("berth images tag: exit %d %s", res.ExitCode, res.Stderr)
	}
	busybox := reg + "/library/busybox:latest"
	res = framework.RunBerth(t, "images", "tag", "--config", d.ConfigPath, "--address", d.Socket, id, busybox)
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "already exists") {
		t.Errorf("tag over busybox without --force: exit %d %q", res.ExitCode, res.Stderr)
	}
	if status(t, d, busybox).GetId() == id {
		t.Errorf("busybox's tag moved without --force")
	}

	// An untagged Docker 25 archive on standard input: listed by its ID.
	other := localImage(t, reg, "untagged")
	stdout, stderr, err := berthCmd(t, docker25Archive(t, "example.com/local/other:v1", other), "images", "import", "--config", d.ConfigPath, "--address", d.Socket, "-")
	if err != nil || !strings.Contains(stdout, configID(t, other)+" example.com/local/other:v1") {
		t.Fatalf("import from stdin: %v\n%s%s", err, stdout, stderr)
	}
	if st := status(t, d, configID(t, other)); st.GetPinned() || len(st.GetRepoDigests()) != 1 {
		t.Errorf("docker 25 import: pinned %v digests %v, want not pinned, one repo digest", st.GetPinned(), st.GetRepoDigests())
	}

	// A hostile archive is refused and leaves nothing.
	before := len(list(t, d))
	_, stderr, err = berthCmd(t, []byte("not an archive at all, only bytes that end too soon"), "images", "import", "--config", d.ConfigPath, "--address", d.Socket)
	if err == nil || !strings.Contains(stderr, "invalid image archive") {
		t.Errorf("garbage import: %v %q", err, stderr)
	}
	if n := len(list(t, d)); n != before {
		t.Errorf("%d images after a failed import, %d before", n, before)
	}

	// Offline import is refused while the daemon holds the root.
	res = framework.RunBerth(t, "images", "import", "--config", d.ConfigPath, "--root", d.Root, archive)
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "already using root dir") {
		t.Errorf("offline import beside the daemon: exit %d %q", res.ExitCode, res.Stderr)
	}
}

// TestImportOffline: berth images import --root writes a store that a
// daemon started on it then serves, pinned, as a node image build does.
func TestImportOffline(t *testing.T) {
	reg := registry(t)
	img := localImage(t, reg, "preloaded")
	tag := "registry.k8s.io/preloaded:v1"
	archive := dockerArchive(t, tag, img)
	root := filepath.Join(framework.TempDir(t), "var", "lib", "berth")
	res := framework.RunBerth(t, "images", "import", "--config", "/dev/null", "--root", root, "--pinned", archive)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, configID(t, img)+" "+tag) {
		t.Fatalf("offline import: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = framework.RunBerth(t, "images", "tag", "--config", "/dev/null", "--root", root, tag, "registry.k8s.io/preloaded:latest")
	if res.ExitCode != 0 {
		t.Fatalf("offline tag: exit %d\n%s", res.ExitCode, res.Stderr)
	}

	d := framework.StartDaemon(t, framework.WithArgs("--root", root))
	st := status(t, d, tag)
	if st.GetId() != configID(t, img) || !st.GetPinned() || !contains(st.GetRepoTags(), "registry.k8s.io/preloaded:latest") {
		t.Errorf("daemon on the preloaded root: %+v", st)
	}
}

// TestImportTimeBig measures berth images import of berth-test/big (5
// layers, ~100 MiB) as a docker-archive, through the daemon, into an empty
// store, 5 times, and prints the median; where containerd and ctr are
// installed, ctr images import of the same file (unpacked, as kind load
// has it) in the same run, for the ratio. Only with BERTH_MEASURE_IMPORT=1:
//
//	BERTH_MEASURE_IMPORT=1 hack/registry -- go test ./test/image/ -run ImportTimeBig -v
func TestImportTimeBig(t *testing.T) {
	reg := registry(t)
	if os.Getenv("BERTH_MEASURE_IMPORT") == "" {
		t.Skip("a measurement, not a test: set BERTH_MEASURE_IMPORT=1")
	}
	const rounds = 5
	ref, err := name.ParseReference(reg+"/berth-test/big:latest", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	big, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	tag := "example.com/big:v1"
	archive := dockerArchive(t, tag, big)
	d := framework.StartDaemon(t)
	var containerd *containerdProc
	if _, err := exec.LookPath("containerd"); err == nil {
		containerd = startContainerd(t)
	}
	results := map[string][]time.Duration{}
	for range rounds {
		assertNoTrace(t, d)
		results["berth images import"] = append(results["berth images import"],
			timeCmd(t, framework.Binary(t), "images", "import", "--config", d.ConfigPath, "--address", d.Socket, archive))
		remove(t, d, tag)
		if containerd != nil {
			results["containerd 1.6 (ctr import)"] = append(results["containerd 1.6 (ctr import)"],
				timeCmd(t, "ctr", containerd.args("images", "import", "--all-platforms", "--digests", "--snapshotter=overlayfs", archive)...))
			timeCmd(t, "ctr", containerd.args("images", "rm", "--sync", tag)...)
		}
	}
	for name, times := range results {
		slices.Sort(times)
		t.Logf("%-28s median %6s  (min %s, max %s, n=%d)", name, times[len(times)/2].Round(time.Millisecond),
			times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), len(times))
	}
}
