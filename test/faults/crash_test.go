package faults_test

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	fp "github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/test/framework"
)

// TestCrashAtFaultPoints SIGKILLs berth at every named step of
// RunPodSandbox, CreateContainer, StartContainer, StopPodSandbox,
// RemovePodSandbox, StopContainer, RemoveContainer, PullImage and
// RemoveImage (internal/faultpoint), with pods of each kind (pod network,
// node network, own user namespace, infra container from a pause image).
// For each, after a restart: berth serves and lists sanely, the client's
// retry succeeds or fails with a clean error, every pod can then be
// stopped and removed, and the host holds exactly what it held before the
// case (no netns pin, lease, NAT rule, mount, cgroup, veth, process or
// file left). A bystander pod runs through all of it: its container keeps
// its process, its pod stays ready.
func TestCrashAtFaultPoints(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-crash")
	kinds := crashKinds(e)
	bystander := (&crasher{t: t, e: e}).newBystander()
	// Pulled once, before any snapshot: the pods of the "pauseimage"
	// variant run their infra container from it.
	if _, err := e.D.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: crashPauseImage(e)}}); err != nil {
		t.Fatalf("pull %s: %v", crashPauseImage(e), err)
	}
	args := slices.Clone(e.D.Args)
	type crashCase struct{ point, variant string }
	var cases []crashCase
	for _, point := range fp.All() {
		for _, variant := range []string{"", "hostnet", "userns", "pauseimage"} {
			if crashApplies(point, variant) {
				cases = append(cases, crashCase{point, variant})
			}
		}
	}
	for _, cc := range cases {
		point := cc.point
		kind := kinds[strings.SplitN(point, "/", 2)[0]]
		t.Run(strings.ReplaceAll(point, "/", "_")+"_"+cmp.Or(cc.variant, "podnet"), func(t *testing.T) {
			c := &crasher{t: t, e: e, variant: cc.variant, bystander: bystander, args: args}
			before := framework.SnapshotHost(t, crashScope(e))
			marker := c.arm(point)
			f := &crashFixture{}
			if kind.setup != nil {
				kind.setup(c, f)
			}
			c.crash(marker, kind.call(c, f))
			kind.retry(c, f)
			c.removeAll()
			c.removeImage(crashPullImage(e))
			framework.CheckHost(t, before)
		})
		if t.Failed() {
			// The next case would start from this one's leftovers.
			e.D.SetEnv()
			e.D.Restart()
			(&crasher{t: t, e: e, bystander: bystander}).removeAll()
		}
	}
}

// crashApplies says whether a pod variant goes through point: a pull has
// no pod, a pod on the node's network no netns and no CNI.
func crashApplies(point, variant string) bool {
	if strings.HasPrefix(point, "PullImage/") || strings.HasPrefix(point, "RemoveImage/") {
		return variant == ""
	}
	if point == fp.RunInfraCreated {
		return variant == "pauseimage"
	}
	if variant == "hostnet" {
		return point != fp.RunNetNS && point != fp.RunCNIAdded && point != fp.StopBeforeCNIDel
	}
	// An infra container from an image is a path of its own through Run,
	// Stop and Remove; it makes no difference to the containers' calls.
	if variant == "pauseimage" {
		return strings.HasPrefix(point, "RunPodSandbox/") || strings.HasPrefix(point, "StopPodSandbox/") || strings.HasPrefix(point, "RemovePodSandbox/")
	}
	return true
}

// crashPullImage is an image with layers of its own on top of busybox,
// pulled only by the PullImage cases.
func crashPullImage(e *framework.PodEnv) string {
	return strings.TrimSuffix(e.Image, "library/busybox:latest") + "berth-test/whiteout:latest"
}
