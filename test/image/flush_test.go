package image_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/test/framework"
)

// A pull answers before its layers are on disk (image/sync.go). berth
// SIGKILLed after the answer, with the flush not done: restarted on the
// same boot it keeps the image (the page cache holds the files) and
// flushes the layers itself.
func TestKilledBeforeLayerFlush(t *testing.T) {
	ref := registry(t) + "/library/busybox:latest"
	d := framework.StartDaemon(t)
	marker := filepath.Join(t.TempDir(), "reached")
	d.SetEnv(faultpoint.Env(faultpoint.PullLayerFlushing, marker, 0)...)
	d.Restart()
	id := pull(t, d, ref)
	framework.WaitFile(t, marker, 30*time.Second, "the layer flush after the pull did not reach "+faultpoint.PullLayerFlushing)
	d.Kill()
	if n := pendingLayers(t, d); n == 0 {
		t.Fatal("no layer record pending after a kill inside the flush: the case tests nothing")
	}
	d.SetEnv()
	d.Restart()
	if img := status(t, d, ref); img.GetId() != id {
		t.Fatalf("image %s after the restart: %v", ref, img)
	}
	for deadline := time.Now().Add(30 * time.Second); pendingLayers(t, d) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d layer records still pending 30 s after the restart", pendingLayers(t, d))
		}
	}
	remove(t, d, id)
	assertNoTrace(t, d)
}

// pendingLayers counts the layer records not yet flushed.
func pendingLayers(t *testing.T, d *framework.Daemon) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(d.Root, "image", "layer-records", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"PendingBoot"`) {
			n++
		}
	}
	return n
}

// TestStopFlushesLayers: a clean stop waits for the background flush of the
// layers it pulled last (held 3 s here), so that none is left pending for a
// reboot to drop.
func TestStopFlushesLayers(t *testing.T) {
	ref := registry(t) + "/library/busybox:latest"
	d := framework.StartDaemon(t)
	marker := filepath.Join(t.TempDir(), "reached")
	d.SetEnv(faultpoint.Env(faultpoint.PullLayerFlushing, marker, 3*time.Second)...)
	d.Restart()
	id := pull(t, d, ref)
	framework.WaitFile(t, marker, 30*time.Second, "the layer flush after the pull did not reach "+faultpoint.PullLayerFlushing)
	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := pendingLayers(t, d); n > 0 {
		t.Fatalf("%d layer records still pending after a clean stop", n)
	}
	d.SetEnv()
	d.Restart()
	remove(t, d, id)
	assertNoTrace(t, d)
}
