package image_test

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// The registry dies in the middle of a layer: the pull fails and leaves
// nothing behind, not even the layers that had already arrived.
func TestInterruptedPullLeavesNoTrace(t *testing.T) {
	reg := registry(t)
	p := newProxy(t, reg)
	// One 20 MiB layer arrives, the next one is cut.
	p.set(func(p *proxy) { p.cutAfter = 30 << 20 })
	d := framework.StartDaemon(t, framework.WithArgs("--max-concurrent-downloads", "1"))
	_, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(p.Host + "/berth-test/big:latest")})
	if err == nil {
		t.Fatal("pull succeeded although the registry died")
	}
	t.Logf("pull failed as it should: %v", err)
	assertNoTrace(t, d)

	// And nothing is resurrected by a restart.
	d.Restart()
	assertNoTrace(t, d)
}
