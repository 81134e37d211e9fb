package image_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestAmbiguousImageIDPrefix: an image ID prefix that begins two images'
// IDs is InvalidArgument naming both, for ImageStatus (not the empty
// answer that tells the kubelet to pull), RemoveImage (not a success that
// removes nothing) and crictl; a unique prefix still names its image.
func TestAmbiguousImageIDPrefix(t *testing.T) {
	reg := registry(t)
	d := framework.StartDaemon(t)
	// Images differing in one file until two config digests share their
	// first hex digit: at most 17, computed here, and only those two are
	// imported.
	byDigit := map[byte]v1.Image{}
	var pair [2]v1.Image
	for i := 0; pair[1] == nil; i++ {
		if i == 17 {
			t.Fatal("17 images and no two IDs share a first digit")
		}
		img := localImage(t, reg, fmt.Sprintf("prefix %d", i))
		digit := configID(t, img)[len("sha256:")]
		if first, ok := byDigit[digit]; ok {
			pair = [2]v1.Image{first, img}
		}
		byDigit[digit] = img
	}
	var ids [2]string
	for n, img := range pair {
		tag := fmt.Sprintf("example.com/prefix/image-%d:v1", n)
		res := framework.RunBerth(t, "images", "import", "--config", d.ConfigPath, "--address", d.Socket, dockerArchive(t, tag, img))
		if res.ExitCode != 0 {
			t.Fatalf("berth images import: exit %d\n%s", res.ExitCode, res.Stderr)
		}
		ids[n] = configID(t, img)
	}
	prefix := ids[0][:len("sha256:")+1]
	ambiguous := func(call string, err error) {
		t.Helper()
		st := grpcstatus.Convert(err)
		if err == nil || st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), ids[0]) || !strings.Contains(st.Message(), ids[1]) {
			t.Errorf("%s %s: %v; want InvalidArgument naming %s and %s", call, prefix, err, ids[0], ids[1])
		}
	}
	_, err := d.Image.ImageStatus(framework.Ctx(t), &runtimeapi.ImageStatusRequest{Image: spec(prefix)})
	ambiguous("ImageStatus", err)
	_, err = d.Image.RemoveImage(framework.Ctx(t), &runtimeapi.RemoveImageRequest{Image: spec(prefix)})
	ambiguous("RemoveImage", err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep := "unix://" + d.Socket
	out, err := exec.CommandContext(ctx, framework.CrictlOrCached(t), "--runtime-endpoint", ep, "--image-endpoint", ep, "rmi", prefix).CombinedOutput()
	if err == nil || !strings.Contains(string(out), ids[0]) || !strings.Contains(string(out), ids[1]) {
		t.Errorf("crictl rmi %s: %v\n%s\nwant a failure naming both images", prefix, err, out)
	}
	for _, id := range ids {
		if st := status(t, d, id); st.GetId() != id {
			t.Errorf("image %s after the refused calls: %v", id, st)
		}
	}
	// The two differ at some digit: one more than they share is unique
	// between them (busybox is not in this daemon).
	n := 0
	for ids[0][n] == ids[1][n] {
		n++
	}
	if st := status(t, d, ids[1][:n+1]); st.GetId() != ids[1] {
		t.Errorf("status by the unique prefix %s: %v", ids[1][:n+1], st)
	}
	if _, err := d.Image.RemoveImage(framework.Ctx(t), &runtimeapi.RemoveImageRequest{Image: spec("sha256:" + framework.RandHex(32))}); err != nil {
		t.Errorf("RemoveImage of a missing image: %v", err)
	}
}
