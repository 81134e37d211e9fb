package image_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
)

func crictl(t *testing.T, d *framework.Daemon, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ep := "unix://" + d.Socket
	cmd := exec.CommandContext(ctx, framework.Crictl(t), append([]string{"--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "60s"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("crictl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func TestCrictl(t *testing.T) {
	reg := registry(t)
	framework.Crictl(t)
	d := framework.StartDaemon(t)
	ref := reg + "/library/busybox:1.36"

	if out := crictl(t, d, "pull", ref); !strings.Contains(out, "sha256:") {
		t.Errorf("crictl pull: %s", out)
	}
	out := crictl(t, d, "images")
	if !strings.Contains(out, reg+"/library/busybox") || !strings.Contains(out, "1.36") {
		t.Errorf("crictl images:\n%s", out)
	}
	var inspect struct {
		Status struct {
			ID       string   `json:"id"`
			RepoTags []string `json:"repoTags"`
			Size     string   `json:"size"`
		} `json:"status"`
		Info map[string]any `json:"info"`
	}
	out = crictl(t, d, "inspecti", ref)
	if err := json.Unmarshal([]byte(out), &inspect); err != nil {
		t.Fatalf("crictl inspecti: %v\n%s", err, out)
	}
	if !strings.HasPrefix(inspect.Status.ID, "sha256:") || !contains(inspect.Status.RepoTags, ref) || inspect.Status.Size == "" || inspect.Info["imageSpec"] == nil {
		t.Errorf("crictl inspecti:\n%s", out)
	}
	out = crictl(t, d, "imagefsinfo")
	if !strings.Contains(out, "usedBytes") || !strings.Contains(out, "mountpoint") {
		t.Errorf("crictl imagefsinfo:\n%s", out)
	}
	crictl(t, d, "rmi", ref)
	if out := crictl(t, d, "images", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("images after rmi:\n%s", out)
	}
	assertNoTrace(t, d)
}
