package kubelet_test

import (
	"net"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
	"github.com/berth-runtime/berth/test/kubehost"
)

// survivorPod serves its own /etc (hostname included) over HTTP.
const survivorPod = `apiVersion: v1
kind: Pod
metadata:
  name: survivor
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: server
    image: busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec httpd -f -p 8080 -h /etc"]
`

// TestReboot: the node reboots under a running static pod. Berth comes
// back with its state root empty and its images kept, reports no pod, and
// the kubelet, started again with what it knew of its pods, creates the
// pod anew on berth: a new sandbox with an IP, serving.
func TestReboot(t *testing.T) {
	e := newEnv(t)
	k := e.startKubelet(kubeletOptions{})
	name := "survivor-" + e.nodeName
	k.writeManifest("survivor", survivorPod)
	running := func(p *pod) bool {
		s := p.container("server")
		return p.Status.Phase == "Running" && p.Status.PodIP != "" && s != nil && s.State.Running != nil
	}
	before := k.waitPod(t, name, 4*time.Minute, "Running with an IP", running)
	sbs := e.podSandboxes(t, before.Metadata.UID)
	if len(sbs) != 1 {
		t.Fatalf("berth's sandboxes of %s before the reboot: %v", name, sbs)
	}
	oldSandbox := sbs[0].Id

	k.stop(t)
	e.d.Reboot(t, e.cgroup+"/kubepods")
	// A reboot empties the nat table too: the bridge plugin's masquerading
	// of the old pod IP goes with it (its DEL cannot find that IP without
	// the pod's netns, gone at the reboot).
	if _, err := kubehost.DeleteNATRulesNaming(strings.TrimSuffix(e.subnet.IP.String(), "0")); err != nil {
		t.Error(err)
	}
	e.d.Restart()
	ctx := framework.Ctx(t)
	pods, err := e.d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods after the reboot: %v %v, want none", pods, err)
	}
	ctrs, err := e.d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(ctrs.Containers) != 0 {
		t.Fatalf("containers after the reboot: %v %v, want none", ctrs, err)
	}
	imgs, err := e.d.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(imgs.Images) == 0 {
		t.Fatalf("images after the reboot: %v %v, want those pulled before", imgs, err)
	}

	k.start(t)
	after := k.waitPod(t, name, 4*time.Minute, "Running again after the reboot", func(p *pod) bool {
		return running(p) && p.container("server").ContainerID != before.container("server").ContainerID
	})
	sbs = e.podSandboxes(t, after.Metadata.UID)
	if len(sbs) != 1 || sbs[0].Id == oldSandbox || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("berth's sandboxes of %s after the reboot: %v, want one new ready sandbox", name, sbs)
	}
	ip := net.ParseIP(after.Status.PodIP)
	if ip == nil || !e.subnet.Contains(ip) {
		t.Errorf("pod IP %s is not in the pod subnet %s", after.Status.PodIP, e.subnet)
	}
	if l := e.leases(); len(l) != 1 || l[0] != after.Status.PodIP {
		t.Errorf("IP leases after the reboot: %v, want only %s", l, after.Status.PodIP)
	}
	waitFor(t, 30*time.Second, "the pod serving its hostname", func() (bool, string) {
		body, err := httpGet("http://" + net.JoinHostPort(after.Status.PodIP, "8080") + "/hostname")
		if err != nil {
			return false, err.Error()
		}
		return strings.TrimSpace(body) == name, "body " + body
	})
}
