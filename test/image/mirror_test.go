package image_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func mirrorConfig(registry string, mirrors ...string) string {
	s := fmt.Sprintf("[registries.%q]\nmirrors = [", registry)
	for i, m := range mirrors {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", m)
	}
	return s + "]\n"
}

func TestMirrors(t *testing.T) {
	reg := registry(t)

	t.Run("mirror before upstream", func(t *testing.T) {
		upstream, mirror := newProxy(t, reg), newProxy(t, reg)
		d := framework.StartDaemon(t, framework.WithConfig(mirrorConfig(upstream.Host, "http://"+mirror.Host)))
		ref := upstream.Host + "/library/busybox:latest"
		pull(t, d, ref)
		if n, _ := upstream.stats(); n != 0 {
			t.Errorf("upstream got %d requests although the mirror has the image", n)
		}
		if n, _ := mirror.stats(); n == 0 {
			t.Error("mirror not asked")
		}
		if img := status(t, d, ref); !contains(img.GetRepoTags(), ref) {
			t.Errorf("tags %v: want the name pulled, not the mirror's", img.GetRepoTags())
		}
	})

	t.Run("upstream when mirrors fail", func(t *testing.T) {
		upstream, failing, empty := newProxy(t, reg), newProxy(t, reg), newProxy(t, reg)
		failing.set(func(p *proxy) { p.failWith = http.StatusServiceUnavailable })
		empty.set(func(p *proxy) { p.failWith = http.StatusNotFound })
		closed := framework.FreeTCPAddr(t)
		d := framework.StartDaemon(t, framework.WithConfig(mirrorConfig(upstream.Host,
			"http://"+closed, "http://"+failing.Host, "http://"+empty.Host)))
		pull(t, d, upstream.Host+"/library/busybox:latest")
		for name, p := range map[string]*proxy{"failing mirror": failing, "empty mirror": empty, "upstream": upstream} {
			if n, _ := p.stats(); n == 0 {
				t.Errorf("%s not asked", name)
			}
		}
	})

	// How critest runs offline: its hard-coded registry.k8s.io name is
	// served by the local registry.
	t.Run("upstream name served by a mirror", func(t *testing.T) {
		d := framework.StartDaemon(t, framework.WithConfig(mirrorConfig("registry.k8s.io", "http://"+reg)))
		ref := "registry.k8s.io/e2e-test-images/busybox:1.29-2"
		pull(t, d, ref)
		if img := status(t, d, ref); !contains(img.GetRepoTags(), ref) {
			t.Errorf("tags %v", img.GetRepoTags())
		}
	})
}
