package registry_test

import (
	"archive/tar"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// What critest v1.37.0 checks of its images (see test/images/mkimage/critest.go).

const criTools = "k8s-staging-cri-tools/"

// entry returns the tar header of path (no leading slash) in the image's
// layers, top layer first, or nil.
func entry(t *testing.T, img v1.Image, path string) (*tar.Header, string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for i := len(layers) - 1; i >= 0; i-- {
		rc, err := layers[i].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				t.Fatal(err)
			}
			if strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/") == path {
				b, _ := io.ReadAll(tr)
				rc.Close()
				return h, string(b)
			}
		}
		rc.Close()
	}
	return nil, ""
}

func TestCritestImages(t *testing.T) {
	tg := targets(t)[0]
	o := opts(t, tg)
	image := func(r string) (v1.Image, *v1.ConfigFile) {
		t.Helper()
		img, err := remote.Image(ref(t, tg, r), o...)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		return img, cf
	}
	digest := func(r string) string {
		t.Helper()
		d, err := remote.Head(ref(t, tg, r), o...)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		return d.Digest.String()
	}

	t.Run("users", func(t *testing.T) {
		for name, user := range map[string]string{
			"test-image-user-uid":            "1002",
			"test-image-user-username":       "www-data",
			"test-image-user-uid-group":      "1003:1004",
			"test-image-user-username-group": "www-data:1004",
			"test-image-predefined-group":    "1000",
		} {
			if _, cf := image(criTools + name + ":latest"); cf.Config.User != user {
				t.Errorf("%s: User %q, want %q", name, cf.Config.User, user)
			}
		}
		img, _ := image(criTools + "test-image-predefined-group:latest")
		if _, group := entry(t, img, "etc/group"); !strings.Contains(group, "\ngroup-defined-in-image:x:50000:default-user\n") {
			t.Errorf("predefined group: /etc/group is %q", group)
		}
		if _, passwd := entry(t, img, "etc/passwd"); !strings.Contains(passwd, "\ndefault-user:x:1000:1000:") {
			t.Errorf("predefined group: /etc/passwd is %q", passwd)
		}
	})

	t.Run("tags", func(t *testing.T) {
		ids := map[string]bool{}
		for _, n := range []string{"test-image-1", "test-image-2", "test-image-3", "test-image-latest"} {
			ids[digest(criTools+n+":latest")] = true
		}
		ids[digest(criTools+"test-image-tag:test")] = true
		ids[digest(criTools+"test-image-tag:all")] = true
		ids[digest(criTools+"test-image-tags:1")] = true
		if len(ids) != 7 {
			t.Errorf("test-image-1/2/3/latest, test-image-tag:test/all and test-image-tags: %d distinct digests, want 7", len(ids))
		}
		if a, b, c := digest(criTools+"test-image-tags:1"), digest(criTools+"test-image-tags:2"), digest(criTools+"test-image-tags:3"); a != b || b != c {
			t.Errorf("test-image-tags:1/2/3 are %s %s %s, want one image", a, b, c)
		}
		desc, err := remote.Get(ref(t, tg, criTools+"test-image-tag:all"), o...)
		if err != nil {
			t.Fatal(err)
		}
		if !desc.MediaType.IsIndex() {
			t.Errorf("test-image-tag:all is a %s, want an index", desc.MediaType)
		}
	})

	t.Run("pause", func(t *testing.T) {
		img, cf := image("pause:3.9")
		if !slices.Equal(cf.Config.Entrypoint, []string{"/pause"}) || cf.Config.User != "65535:65535" {
			t.Errorf("pause: entrypoint %q user %q", cf.Config.Entrypoint, cf.Config.User)
		}
		if h, _ := entry(t, img, "pause"); h == nil || h.Mode&0o111 == 0 {
			t.Errorf("pause: /pause is %+v, want an executable", h)
		}
	})

	t.Run("nonewprivs", func(t *testing.T) {
		img, cf := image("e2e-test-images/nonewprivs:1.3")
		if !slices.Equal(cf.Config.Cmd, []string{"/usr/local/bin/nnp"}) {
			t.Errorf("nonewprivs: cmd %q", cf.Config.Cmd)
		}
		h, _ := entry(t, img, "usr/local/bin/nnp")
		if h == nil || h.Mode&0o4000 == 0 || h.Uid != 0 {
			t.Errorf("nonewprivs: /usr/local/bin/nnp is %+v, want setuid root", h)
		}
	})

	t.Run("web servers", func(t *testing.T) {
		img, cf := image("e2e-test-images/nginx:1.14-2")
		if !slices.Equal(cf.Config.Cmd, []string{"nginx", "-g", "daemon off;"}) {
			t.Errorf("nginx: cmd %q", cf.Config.Cmd)
		}
		if _, conf := entry(t, img, "etc/nginx/nginx.conf"); !strings.Contains(conf, "pid /var/run/nginx.pid;") {
			t.Errorf("nginx: nginx.conf %q lacks the pid file", conf)
		}
		if _, conf := entry(t, img, "etc/nginx/conf.d/default.conf"); !strings.Contains(conf, "listen 80;") {
			t.Errorf("nginx: default.conf %q does not listen on 80", conf)
		}
		img, _ = image(criTools + "hostnet-nginx-amd64:latest")
		if _, conf := entry(t, img, "etc/nginx/conf.d/default.conf"); !strings.Contains(conf, "listen 12003;") {
			t.Errorf("hostnet-nginx: default.conf %q does not listen on 12003", conf)
		}
		img, cf = image("e2e-test-images/httpd:2.4.39-4")
		if !slices.Equal(cf.Config.Cmd, []string{"httpd-foreground"}) {
			t.Errorf("httpd: cmd %q", cf.Config.Cmd)
		}
		for _, f := range []string{"usr/local/apache2/bin/httpd", "usr/local/apache2/conf/httpd.conf", "bin/echo"} {
			if h, _ := entry(t, img, f); h == nil {
				t.Errorf("httpd: no /%s", f)
			}
		}
	})
}
