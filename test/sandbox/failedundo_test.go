package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// TestFailedUndoKeepsPod: the CNI plugin attaches the pod (bridge and
// host-local: a veth and an IP lease), fails the ADD, and fails the DEL
// that undoes it while a marker file exists. RunPodSandbox fails; the pod
// must stay listed, not ready, holding its lease, so that the kubelet's
// stop retries the DEL: before, berth forgot it and each retry of the
// kubelet leaked one more lease (3 retries: 0 pods listed, 3 leases). A
// retry of the same name and attempt makes no second pod; new attempts
// (as the kubelet makes once it sees the failed pod) each leave one pod
// listed. Once DEL works, stop and remove of what is listed leave no
// lease, pod or netns pin.
func TestFailedUndoKeepsPod(t *testing.T) {
	refuse := filepath.Join(t.TempDir(), "refuse-del")
	if err := os.WriteFile(refuse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var net *cnitest.Net
	e := newEnv(t, func(o *envOptions) {
		o.prepare = func(n *cnitest.Net) (string, []string) {
			net = n
			conf := n.Conflist("fail-after-bridge")
			conf["plugins"].([]any)[0].(map[string]any)["refuseDelWhile"] = refuse
			n.WriteConf(t, "10-"+n.Name+".conflist", conf)
			return n.ConfDir, []string{buildFailCNI(t), n.BinDir}
		}
	})
	// Before the env's cleanup (LIFO): a test failing half-way still
	// lets it remove what is listed.
	t.Cleanup(func() { os.Remove(refuse) })
	ctx := framework.Ctx(t)
	cfg := e.config("undo")

	const retries = 3
	var first string
	for i := range retries {
		_, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		switch {
		case err == nil:
			t.Fatalf("RunPodSandbox %d succeeded with a plugin that fails ADD", i)
		case i == 0 && !strings.Contains(err.Error(), "ADD fails after the bridge plugin attached"):
			t.Fatalf("RunPodSandbox: %v, want the plugin's error", err)
		case i > 0 && (status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), first)):
			t.Fatalf("retry %d of the same name and attempt: %v, want AlreadyExists naming pod %s", i, err, first)
		}
		pods := listPods(t, e)
		if len(pods) != 1 || pods[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Fatalf("after run %d: listed %v, want the failed pod, not ready", i, pods)
		}
		first = pods[0].Id
		checkLeases(t, net, pods)
	}
	// The kubelet, seeing a failed sandbox, makes the next attempt.
	for attempt := uint32(1); attempt <= 2; attempt++ {
		cfg.Metadata.Attempt = attempt
		if _, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg}); err == nil {
			t.Fatalf("attempt %d succeeded", attempt)
		}
		pods := listPods(t, e)
		if len(pods) != int(attempt)+1 {
			t.Fatalf("after attempt %d: %d pods listed, want %d", attempt, len(pods), attempt+1)
		}
		checkLeases(t, net, pods)
	}
	pods := listPods(t, e)
	if got := len(net.Leases(t)); got != len(pods) {
		t.Fatalf("%d leases for %d listed pods", got, len(pods))
	}
	for _, p := range pods {
		if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err == nil || !strings.Contains(err.Error(), "DEL refused") {
			t.Fatalf("stop of %s while DEL fails: %v, want the plugin's error", p.Id, err)
		}
	}

	if err := os.Remove(refuse); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		e.stop(p.Id)
		e.remove(p.Id)
	}
	if left := listPods(t, e); len(left) != 0 {
		t.Fatalf("still listed after stop and remove: %v", left)
	}
	if leases := net.Leases(t); len(leases) != 0 {
		t.Fatalf("leases left after stop and remove: %v", leases)
	}
	for _, p := range pods {
		if left := e.leftovers(p.Id, ""); len(left) != 0 {
			t.Errorf("left of pod %s: %v", p.Id, left)
		}
	}
	// The name is free again.
	cfg.Metadata.Attempt = 0
	if _, err := e.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg}); status.Code(err) == codes.AlreadyExists {
		t.Fatalf("name still taken after remove: %v", err)
	}
}

func listPods(t *testing.T, e *env) []*runtimeapi.PodSandbox {
	t.Helper()
	resp, err := e.d.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Items
}

// checkLeases fails the test unless every host-local lease is held by a
// listed pod (a lease file holds the container id, CNI_CONTAINERID, which
// is the pod's), at most one each.
func checkLeases(t *testing.T, n *cnitest.Net, pods []*runtimeapi.PodSandbox) {
	t.Helper()
	var ids []string
	for _, p := range pods {
		ids = append(ids, p.Id)
	}
	held := map[string]int{}
	for _, ip := range n.Leases(t) {
		b, err := os.ReadFile(filepath.Join(n.DataDir, n.Name, ip))
		if err != nil {
			t.Fatal(err)
		}
		// "<id>\r\n<ifname>"
		owner := ""
		if f := strings.Fields(string(b)); len(f) > 0 {
			owner = f[0]
		}
		if !slices.Contains(ids, owner) {
			t.Fatalf("lease %s held by %q, which is not a listed pod (%v): leaked", ip, owner, ids)
		}
		if held[owner]++; held[owner] > 1 {
			t.Fatalf("pod %s holds %d leases", owner, held[owner])
		}
	}
}

// buildFailCNI builds testdata/failcni into a bin dir of its own as
// fail-after-bridge.
func buildFailCNI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "fail-after-bridge"), "./testdata/failcni")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the failing CNI plugin: %v\n%s", err, out)
	}
	return dir
}
