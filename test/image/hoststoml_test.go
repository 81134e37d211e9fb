package image_test

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// newTLSProxy is newProxy over HTTPS, with the server's certificate.
func newTLSProxy(t *testing.T, upstream string) (*proxy, []byte) {
	t.Helper()
	p := &proxy{blobGets: map[string]int{}}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, upstream) }))
	t.Cleanup(p.srv.Close)
	p.Host = strings.TrimPrefix(p.srv.URL, "https://")
	return p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
}

func writeHostsToml(t *testing.T, certsD, host, body string) string {
	t.Helper()
	dir := filepath.Join(certsD, host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "hosts.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostsToml: containerd's certs.d directories (registry_config_path),
// as kind nodes and kind's local-registry guide use them.
func TestHostsToml(t *testing.T) {
	reg := registry(t)

	// kind's guide, step 3: a node pulls localhost:5001/... and the
	// hosts.toml written into it after start sends the pull to the
	// registry container. Here localhost:<port> has nothing listening.
	t.Run("kind's local registry", func(t *testing.T) {
		certsD := t.TempDir()
		mirror := newProxy(t, reg)
		d := framework.StartDaemon(t, framework.WithConfig(fmt.Sprintf("registry_config_path = %q\n", certsD)))
		local := "localhost:" + strings.Split(framework.FreeTCPAddr(t), ":")[1]
		ref := local + "/library/busybox:latest"
		if _, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(ref)}); err == nil {
			t.Fatalf("pull %s succeeded with nothing on %s and no hosts.toml", ref, local)
		}
		// The guide's file, with the registry container's name replaced
		// by the test registry's address.
		writeHostsToml(t, certsD, local, fmt.Sprintf("[host.%q]\n", "http://"+mirror.Host))
		pull(t, d, ref)
		if n, _ := mirror.stats(); n == 0 {
			t.Error("the hosts.toml host was not asked")
		}
		if img := status(t, d, ref); !contains(img.GetRepoTags(), ref) {
			t.Errorf("tags %v: want the name pulled, %s", img.GetRepoTags(), ref)
		}
	})

	// An HTTPS mirror verified with the ca the file names, standing in for
	// a registry that is not reachable (offline, as here).
	t.Run("https mirror with its ca", func(t *testing.T) {
		certsD := t.TempDir()
		mirror, ca := newTLSProxy(t, reg)
		p := writeHostsToml(t, certsD, "registry.k8s.io", fmt.Sprintf("server = \"https://registry.k8s.io\"\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"mirror-ca.crt\"\n", "https://"+mirror.Host))
		if err := os.WriteFile(filepath.Join(filepath.Dir(p), "mirror-ca.crt"), ca, 0o644); err != nil {
			t.Fatal(err)
		}
		d := framework.StartDaemon(t, framework.WithConfig(fmt.Sprintf("registry_config_path = %q\n", certsD)))
		ref := "registry.k8s.io/e2e-test-images/busybox:1.29-2"
		pull(t, d, ref)
		if n, _ := mirror.stats(); n == 0 {
			t.Error("the https mirror was not asked")
		}
	})

	// A host's own hosts.toml wins over its [registries] mirrors.
	t.Run("hosts.toml over [registries]", func(t *testing.T) {
		certsD := t.TempDir()
		upstream, configured, fromFile := newProxy(t, reg), newProxy(t, reg), newProxy(t, reg)
		writeHostsToml(t, certsD, upstream.Host, fmt.Sprintf("[host.%q]\n", "http://"+fromFile.Host))
		d := framework.StartDaemon(t, framework.WithConfig(fmt.Sprintf("registry_config_path = %q\n", certsD)+mirrorConfig(upstream.Host, "http://"+configured.Host)))
		pull(t, d, upstream.Host+"/library/busybox:latest")
		if n, _ := fromFile.stats(); n == 0 {
			t.Error("the hosts.toml host was not asked")
		}
		for name, p := range map[string]*proxy{"[registries] mirror": configured, "upstream": upstream} {
			if n, _ := p.stats(); n != 0 {
				t.Errorf("%s asked %d times although the hosts.toml host had the image", name, n)
			}
		}
	})

	t.Run("broken hosts.toml fails the pull naming it", func(t *testing.T) {
		certsD := t.TempDir()
		upstream := newProxy(t, reg)
		p := writeHostsToml(t, certsD, upstream.Host, "[host.\"http://nowhere\"\n")
		d := framework.StartDaemon(t, framework.WithConfig(fmt.Sprintf("registry_config_path = %q\n", certsD)))
		_, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(upstream.Host + "/library/busybox:latest")})
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("pull with a broken hosts.toml: %v, want an error naming %s", err, p)
		}
		if n, _ := upstream.stats(); n != 0 {
			t.Errorf("the registry was asked %d times despite the broken file", n)
		}
		assertNoTrace(t, d)
	})
}
