package sandbox_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
)

func TestCrictlPodLifecycle(t *testing.T) {
	crictl := framework.CrictlOrCached(t)
	e := newEnv(t)
	// No host /etc/crictl.yaml may change what this test runs against.
	emptyConfig := filepath.Join(t.TempDir(), "crictl.yaml")
	os.WriteFile(emptyConfig, nil, 0o644)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		full := append([]string{"--config", emptyConfig, "--runtime-endpoint", "unix://" + e.d.Socket, "--timeout", "20s"}, args...)
		cmd := exec.CommandContext(ctx, crictl, full...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("crictl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	podJSON := filepath.Join(t.TempDir(), "pod.json")
	pod := map[string]any{
		"metadata":      map[string]any{"name": "crictl-pod", "namespace": "e2e", "uid": "uid-crictl-" + framework.RandHex(3), "attempt": 1},
		"hostname":      "crictl-pod",
		"labels":        map[string]string{"via": "crictl"},
		"log_directory": t.TempDir(),
		"linux":         map[string]any{"cgroup_parent": e.parent},
	}
	data, _ := json.Marshal(pod)
	if err := os.WriteFile(podJSON, data, 0o644); err != nil {
		t.Fatal(err)
	}

	id := run("runp", podJSON)
	if len(id) != 64 {
		t.Fatalf("crictl runp printed %q, want a pod id", id)
	}
	if out := run("pods", "--label", "via=crictl", "-q"); out != id {
		t.Errorf("crictl pods -q = %q, want %s", out, id)
	}
	if out := run("pods", "--name", "crictl-pod"); !strings.Contains(out, id[:13]) || !strings.Contains(out, "Ready") {
		t.Errorf("crictl pods:\n%s", out)
	}
	var inspect struct {
		Status struct {
			ID      string `json:"id"`
			State   string `json:"state"`
			Network struct {
				IP string `json:"ip"`
			} `json:"network"`
		} `json:"status"`
		Info map[string]any `json:"info"`
	}
	out := run("inspectp", id[:12])
	if err := json.Unmarshal([]byte(out), &inspect); err != nil {
		t.Fatalf("crictl inspectp output: %v\n%s", err, out)
	}
	if inspect.Status.ID != id || inspect.Status.State != "SANDBOX_READY" || inspect.Info["pid"] == nil {
		t.Errorf("crictl inspectp = %+v", inspect)
	}
	inSubnet(t, e.net.Subnet, inspect.Status.Network.IP)

	run("stopp", id)
	if out := run("pods", "--state", "NotReady", "-q"); out != id {
		t.Errorf("crictl pods --state NotReady -q = %q", out)
	}
	run("rmp", id)
	if out := run("pods", "-q"); out != "" {
		t.Errorf("pods after rmp: %q", out)
	}
	if leases := e.net.Leases(t); len(leases) != 0 {
		t.Errorf("leases left: %v", leases)
	}
}
