package image_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// verboseInfo is the part of ImageStatus(verbose) the tests read.
type verboseInfo struct {
	Layers []struct {
		Dir string `json:"dir"`
	} `json:"layers"`
	ImageSpec struct {
		Architecture string `json:"architecture"`
	} `json:"imageSpec"`
}

func verbose(t *testing.T, d *framework.Daemon, ref string) verboseInfo {
	t.Helper()
	resp, err := d.Image.ImageStatus(framework.Ctx(t), &runtimeapi.ImageStatusRequest{Image: spec(ref), Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info verboseInfo
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil {
		t.Fatalf("verbose info %q: %v", resp.GetInfo()["info"], err)
	}
	return info
}

func TestPullByTagDigestAndIndex(t *testing.T) {
	reg := registry(t)
	d := framework.StartDaemon(t)

	tag := reg + "/library/busybox:1.36"
	id := pull(t, d, tag)
	img := status(t, d, tag)
	if img.GetId() != id || !strings.HasPrefix(id, "sha256:") {
		t.Fatalf("pull answered %s, status says %s", id, img.GetId())
	}
	if !contains(img.GetRepoTags(), tag) || len(img.GetRepoDigests()) != 1 || img.GetSize() == 0 {
		t.Errorf("status after pull by tag: %+v", img)
	}
	if info := verbose(t, d, tag); len(info.Layers) == 0 || info.ImageSpec.Architecture != "amd64" {
		t.Errorf("verbose info: %+v", info)
	}

	// The same image by digest, into a fresh daemon: no tag, the digest as asked.
	digest := img.GetRepoDigests()[0]
	d2 := framework.StartDaemon(t)
	if got := pull(t, d2, digest); got != id {
		t.Errorf("pull by digest: %s, want %s", got, id)
	}
	byDigest := status(t, d2, digest)
	if len(byDigest.GetRepoTags()) != 0 || len(byDigest.GetRepoDigests()) != 1 || byDigest.GetRepoDigests()[0] != digest {
		t.Errorf("status after pull by digest: tags %v digests %v", byDigest.GetRepoTags(), byDigest.GetRepoDigests())
	}

	// An index: berth picks linux/amd64.
	multi := reg + "/berth-test/multiarch:latest"
	pull(t, d, multi)
	info := verbose(t, d, multi)
	top := info.Layers[len(info.Layers)-1].Dir
	if b, err := os.ReadFile(filepath.Join(top, "arch")); err != nil || string(b) != "amd64" {
		t.Errorf("multiarch top layer /arch = %q, %v; want amd64", b, err)
	}
	if info.ImageSpec.Architecture != "amd64" {
		t.Errorf("multiarch config architecture %q", info.ImageSpec.Architecture)
	}
	st := status(t, d, multi)
	if !hasPrefixIn(st.GetRepoDigests(), reg+"/berth-test/multiarch@sha256:") {
		t.Errorf("multiarch repo digests %v", st.GetRepoDigests())
	}

	// Every kind of reference answers the same status.
	for _, r := range append(append([]string{id, strings.TrimPrefix(id, "sha256:"), id[7:19]}, img.GetRepoTags()...), img.GetRepoDigests()...) {
		if got := status(t, d, r); got.GetId() != id {
			t.Errorf("status %q: %v", r, got)
		}
	}

	fs, err := d.Image.ImageFsInfo(framework.Ctx(t), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	u := fs.GetImageFilesystems()
	if len(u) != 1 || u[0].GetUsedBytes().GetValue() == 0 || u[0].GetInodesUsed().GetValue() == 0 {
		t.Fatalf("image fs info %v", u)
	}
	if mp := u[0].GetFsId().GetMountpoint(); !isMountpoint(t, mp) || !strings.HasPrefix(d.Root, mp) {
		t.Errorf("fs mountpoint %q is not the mount point holding %s", mp, d.Root)
	}
}

func isMountpoint(t *testing.T, dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

func TestPullErrors(t *testing.T) {
	reg := registry(t)
	d := framework.StartDaemon(t)
	tests := []struct {
		ref  string
		code codes.Code
		says string
	}{
		{"Not/A:Valid:Ref", codes.InvalidArgument, "Not/A:Valid:Ref"},
		{reg + "/library/busybox:no-such-tag", codes.NotFound, "no-such-tag"},
		{reg + "/no/such/repo:latest", codes.NotFound, "no/such/repo"},
	}
	for _, tt := range tests {
		_, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(tt.ref)})
		if grpcstatus.Code(err) != tt.code || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("pull %s: %v, want %s naming %q", tt.ref, err, tt.code, tt.says)
		}
	}
	assertNoTrace(t, d)
}

func TestRemove(t *testing.T) {
	reg := registry(t)
	d := framework.StartDaemon(t)
	tags := []string{reg + "/library/busybox:latest", reg + "/library/busybox:1.36"}
	for _, by := range []string{"tag", "id", "digest"} {
		t.Run(by, func(t *testing.T) {
			var id string
			for _, tag := range tags {
				id = pull(t, d, tag)
			}
			img := status(t, d, id)
			if len(img.GetRepoTags()) != len(tags) {
				t.Fatalf("tags %v: want both tags on one image", img.GetRepoTags())
			}
			name := map[string]string{"tag": tags[1], "id": id, "digest": img.GetRepoDigests()[0]}[by]
			remove(t, d, name)
			for _, r := range append(tags, id, img.GetRepoDigests()[0]) {
				if got := status(t, d, r); got != nil {
					t.Errorf("%s still there after removing by %s", r, by)
				}
			}
			assertNoTrace(t, d)
		})
	}
	// Removing what is not there succeeds.
	remove(t, d, reg+"/library/busybox:latest")
	remove(t, d, "sha256:"+strings.Repeat("0", 64))
}

func TestRestartKeepsImages(t *testing.T) {
	reg := registry(t)
	d := framework.StartDaemon(t)
	pull(t, d, reg+"/library/busybox:latest")
	pull(t, d, reg+"/berth-test/whiteout:latest")
	before := list(t, d)
	d.Restart()
	after := list(t, d)
	if len(after) != len(before) {
		t.Fatalf("%d images after restart, %d before", len(after), len(before))
	}
	for i := range before {
		b, a := before[i], after[i]
		if a.GetId() != b.GetId() || strings.Join(a.GetRepoTags(), ",") != strings.Join(b.GetRepoTags(), ",") ||
			strings.Join(a.GetRepoDigests(), ",") != strings.Join(b.GetRepoDigests(), ",") || a.GetSize() != b.GetSize() {
			t.Errorf("after restart %v\nbefore %v", a, b)
		}
	}
	// Layers are still usable: status still points at existing directories.
	for _, l := range verbose(t, d, reg+"/berth-test/whiteout:latest").Layers {
		if _, err := os.Stat(l.Dir); err != nil {
			t.Error(err)
		}
	}
}
