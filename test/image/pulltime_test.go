package image_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestPullTimeBig measures pulls of berth-test/big (5 layers, ~100 MiB)
// from the local registry into an empty store, 5 times each, and prints
// the medians; docs/images.md has the method and the figures. berth is
// timed through its CRI client and through crictl; where containerd and
// ctr are installed, containerd is timed in the same run with ctr, for
// the ratio. Only with BERTH_MEASURE_PULL=1:
//
//	BERTH_MEASURE_PULL=1 hack/registry -- go test ./test/image/ -run PullTimeBig -v
func TestPullTimeBig(t *testing.T) {
	reg := registry(t)
	if os.Getenv("BERTH_MEASURE_PULL") == "" {
		t.Skip("a measurement, not a test: set BERTH_MEASURE_PULL=1")
	}
	const rounds = 5
	ref := reg + "/berth-test/big:latest"
	d := framework.StartDaemon(t)
	crictlBin := os.Getenv(framework.EnvCrictl)
	var containerd *containerdProc
	if _, err := exec.LookPath("containerd"); err == nil {
		containerd = startContainerd(t)
	}

	results := map[string][]time.Duration{}
	for range rounds {
		assertNoTrace(t, d) // cold: nothing of the image is stored
		start := time.Now()
		resp, err := d.Image.PullImage(t.Context(), &runtimeapi.PullImageRequest{Image: spec(ref)})
		results["berth (CRI client)"] = append(results["berth (CRI client)"], time.Since(start))
		if err != nil {
			t.Fatal(err)
		}
		remove(t, d, resp.GetImageRef())

		if crictlBin != "" {
			ep := "unix://" + d.Socket
			results["berth (crictl pull)"] = append(results["berth (crictl pull)"],
				timeCmd(t, crictlBin, "--runtime-endpoint", ep, "--image-endpoint", ep, "pull", ref))
			remove(t, d, ref)
		}
		if containerd != nil {
			results["containerd 1.6 (ctr pull)"] = append(results["containerd 1.6 (ctr pull)"],
				timeCmd(t, "ctr", containerd.args("images", "pull", "--plain-http", ref)...))
			timeCmd(t, "ctr", containerd.args("images", "rm", "--sync", ref)...)
			// Only the header line is left when no snapshot remains.
			out, err := exec.Command("ctr", containerd.args("snapshots", "ls")...).Output()
			if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err != nil || len(lines) > 1 {
				t.Fatalf("containerd store not cold: %v %s", err, out)
			}
		}
	}
	for name, times := range results {
		slices.Sort(times)
		t.Logf("%-26s median %6s  (min %s, max %s, n=%d)", name, times[len(times)/2].Round(time.Millisecond),
			times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), len(times))
	}
}

func timeCmd(t *testing.T, name string, args ...string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return elapsed
}

// containerdProc is a containerd daemon of the test's own, on temp roots,
// with its CRI plugin off: it is only the reference puller.
type containerdProc struct {
	sock string
}

func (c *containerdProc) args(args ...string) []string {
	return append([]string{"--address", c.sock, "--namespace", "bench"}, args...)
}

func startContainerd(t *testing.T) *containerdProc {
	t.Helper()
	dir := framework.TempDir(t)
	c := &containerdProc{sock: filepath.Join(dir, "containerd.sock")}
	cfg := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
	for deadline := time.Now().Add(15 * time.Second); ; {
		if exec.Command("ctr", c.args("version")...).Run() == nil {
			return c
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("containerd did not start:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
