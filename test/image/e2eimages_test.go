package image_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// TestE2EImagesByUpstreamName: the Kubernetes e2e images hack/e2e-images
// builds are pulled by their upstream names through the certs.d directory
// it writes (the one the node e2e harness gives berth), and agnhost runs:
// its two tags are two images with two binaries. Needs `hack/registry
// --e2e`, which pushes them and sets $BERTH_TEST_E2E_CERTS_D.
func TestE2EImagesByUpstreamName(t *testing.T) {
	registry(t)
	certsD := os.Getenv("BERTH_TEST_E2E_CERTS_D")
	if certsD == "" {
		t.Skip("needs the e2e images: $BERTH_TEST_E2E_CERTS_D is unset (hack/registry --e2e sets it up)")
	}
	n := cnitest.NewNet(t)
	e := &framework.PodEnv{T: t, Parent: "/e2eimages-" + framework.RandHex(4), Net: n}
	t.Cleanup(func() { framework.RemoveCgroup(e.Parent) })
	e.D = framework.StartDaemon(t,
		framework.WithArgs("--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.BinDir),
		framework.WithConfig(fmt.Sprintf("registry_config_path = %q\n", certsD)))

	const agnhost = "registry.k8s.io/e2e-test-images/agnhost:"
	ids := map[string]string{}
	for _, tag := range []string{"2.66.1", "2.55"} {
		pull(t, e.D, agnhost+tag)
		img := status(t, e.D, agnhost+tag)
		if !contains(img.GetRepoTags(), agnhost+tag) {
			t.Errorf("%s: tags %v, want its upstream name", agnhost+tag, img.GetRepoTags())
		}
		ids[tag] = img.GetId()
	}
	if ids["2.66.1"] == ids["2.55"] {
		t.Errorf("agnhost 2.66.1 and 2.55 are one image, %s: the image-update specs need two", ids["2.55"])
	}
	for _, ref := range []string{
		"registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
		"registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
		"registry.k8s.io/pause:3.10.2",
	} {
		pull(t, e.D, ref)
	}
	// The specs' image that must not exist: asked of the test registry too,
	// which has no such repository.
	const invalid = "invalid.registry.k8s.io/invalid/alpine:3.1"
	if _, err := e.D.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(invalid)}); err == nil {
		t.Errorf("pull %s succeeded", invalid)
	}

	pod, podCfg := e.RunPod("agnhost")
	for _, tag := range []string{"2.66.1", "2.55"} {
		name := "version-" + strings.ReplaceAll(tag, ".", "-")
		// The image's own entrypoint (/agnhost), only the arguments given.
		id := e.Run(pod, podCfg, name, "", func(c *runtimeapi.ContainerConfig) {
			c.Image = &runtimeapi.ImageSpec{Image: agnhost + tag}
			c.Command = nil
			c.Args = []string{"--version"}
		})
		if st := e.WaitExit(id, 30*time.Second); st.GetExitCode() != 0 {
			t.Errorf("agnhost %s --version: exit code %d (%s)", tag, st.GetExitCode(), st.GetMessage())
		}
		log, err := os.ReadFile(filepath.Join(podCfg.LogDirectory, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "version "+tag+"\n") {
			t.Errorf("agnhost %s --version logged %q, want its version", tag, log)
		}
	}

	// What the specs do with them: nginx serves its default page on :80
	// (the pod's network namespace is shared), agnhost's curl fetches it,
	// nonroot runs as 1234 by default, busybox stamps lines as the
	// lifecycle specs do.
	web := e.Run(pod, podCfg, "nginx", "", func(c *runtimeapi.ContainerConfig) {
		c.Image = &runtimeapi.ImageSpec{Image: "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"}
		c.Command = nil
	})
	pull(t, e.D, "registry.k8s.io/e2e-test-images/nonroot:1.5")
	for _, tc := range []struct{ name, image, script, want string }{
		{"curl", agnhost + "2.66.1", "for i in $(seq 50); do curl -fsS http://127.0.0.1/ && exit 0; sleep 0.1; done; exit 1", "Welcome to nginx!"},
		{"nonroot", "registry.k8s.io/e2e-test-images/nonroot:1.5", "id -u", "1234\n"},
		// The container lifecycle specs' time stamp (nmeter, not in
		// Debian's busybox): milliseconds, RFC 3339.
		{"stamp", "registry.k8s.io/e2e-test-images/busybox:1.37.0-2", "echo `date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z` | grep -E '^[0-9-]{10}T[0-9:]{8}[.][0-9]{3}Z$'", "Z\n"},
	} {
		id := e.Run(pod, podCfg, tc.name, tc.script, func(c *runtimeapi.ContainerConfig) {
			c.Image = &runtimeapi.ImageSpec{Image: tc.image}
		})
		st := e.WaitExit(id, 30*time.Second)
		log, err := os.ReadFile(filepath.Join(podCfg.LogDirectory, tc.name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if st.GetExitCode() != 0 || !strings.Contains(string(log), tc.want) {
			t.Errorf("%s in %s: exit code %d, log %q; want 0 and %q", tc.script, tc.image, st.GetExitCode(), log, tc.want)
		}
	}
	if _, err := e.D.Runtime.StopContainer(framework.Ctx(t), &runtimeapi.StopContainerRequest{ContainerId: web, Timeout: 10}); err != nil {
		t.Errorf("stop nginx: %v", err)
	}
}
