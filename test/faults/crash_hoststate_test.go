package faults_test

import (
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestHostStateSeesAPod checks the leak detector itself: a running pod
// with a container shows up in a snapshot as each kind of item the crash
// tests rely on, and once it is removed the host is as before.
func TestHostStateSeesAPod(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-hoststate")
	before := framework.SnapshotHost(t, crashScope(e))

	c := &crasher{t: t, e: e}
	cfg := c.podConfig("hs") // with a host port
	pod := c.runPod(cfg)
	c.start(c.create(pod, cfg))
	start := time.Now()
	during := framework.SnapshotHost(t, crashScope(e))
	t.Logf("snapshot of %d items took %s", len(during.Items), time.Since(start))

	diff := strings.Join(before.Diff(during), "\n")
	for _, want := range []string{
		"leaked: mount " + e.D.State + "/netns/" + pod,
		"leaked: file " + e.D.State + "/netns/" + pod,
		"leaked: lease " + e.Net.DataDir + "/" + e.Net.Name + "/",
		"leaked: cgroup " + framework.CgroupFile(e.Parent, "memory", pod, pod),
		"leaked: veth " + e.Net.Bridge + "/veth",
		"leaked: iptables -A POSTROUTING -s ",
		"leaked: iptables -A CNI-HOSTPORT-DNAT ",
		"leaked: process ",
		"leaked: mount " + e.D.State,
	} {
		if !strings.Contains(diff, want) {
			t.Errorf("a running pod's snapshot has no %q; the diff is:\n%s", want, diff)
		}
	}

	ctx := framework.Ctx(t)
	if _, err := e.D.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.D.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	framework.CheckHost(t, before)
}
