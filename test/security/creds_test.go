package security_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestContainerd_CVE_2020_15157_CredentialLeak: containerd fetched a
// layer from the URLs its manifest listed (a "foreign" layer) with the
// registry's credentials, so a public image could send a user's
// credentials to a server of its author's choosing. A registry that
// asks for credentials serves a manifest whose layer names such a URL,
// and answers the blob itself with a redirect to another host: that
// host must never see the credentials, whatever the pull's outcome.
func TestContainerd_CVE_2020_15157_CredentialLeak(t *testing.T) {
	e := newEnv(t)
	const user, password = "alice", "s3cret-not-for-others"
	reg := newHostileRegistry(t)
	reg.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))

	// The other host: it records what it is sent and serves the layer.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tarBytes(t, file("leaked", "no\n")))
	zw.Close()
	var mu sync.Mutex
	var seen []string
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s Authorization=%q Cookie=%q", req.Method, req.URL.Path, req.Header.Get("Authorization"), req.Header.Get("Cookie")))
		mu.Unlock()
		w.Write(gz.Bytes())
	})}
	go other.Serve(l)
	t.Cleanup(func() { other.Close() })
	otherURL := "http://" + l.Addr().String()

	diff := func() string {
		h := newSHA()
		h.Write(tarBytes(t, file("leaked", "no\n")))
		return fmt.Sprintf("sha256:%x", h.Sum(nil))
	}()
	cfg := configJSON(diff)
	reg.blob(digestOf(cfg), serveJSON(mtConfig, cfg))
	layerDigest := digestOf(gz.Bytes())
	const foreign = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
	for _, c := range []struct {
		repo, mediaType string
		blob            http.HandlerFunc
	}{
		{"foreign", foreign, nil},
		{"redirect", mtLayer, func(w http.ResponseWriter, req *http.Request) {
			http.Redirect(w, req, otherURL+"/redirected"+req.URL.Path, http.StatusTemporaryRedirect)
		}},
	} {
		t.Run(c.repo, func(t *testing.T) {
			m := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":%q,"digest":%q,"size":%d},"layers":[{"mediaType":%q,"digest":%q,"size":%d,"urls":[%q]}]}`,
				mtManifest, mtConfig, digestOf(cfg), len(cfg), c.mediaType, layerDigest, gz.Len(), otherURL+"/foreign/"+layerDigest)
			reg.manifest(c.repo, "v1", serveJSON(mtManifest, []byte(m)))
			reg.blob(layerDigest, c.blob)
			_, err := e.D.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{
				Image: &runtimeapi.ImageSpec{Image: reg.Host + "/" + c.repo + ":v1"},
				Auth:  &runtimeapi.AuthConfig{Username: user, Password: password},
			})
			t.Logf("pull: %v", err)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the other host saw: %v", seen)
	for _, s := range seen {
		if strings.Contains(s, base64.StdEncoding.EncodeToString([]byte(user+":"+password))) || strings.Contains(s, password) || !strings.Contains(s, `Authorization=""`) {
			t.Errorf("the other host was sent credentials: %s", s)
		}
	}
}

// TestCRIO_CVE_2024_8676_CheckpointRestore: CRI-O restored a container
// from a checkpoint archive whose bind mounts named host paths the pod
// had never been allowed (and containerd's later checkpoint import
// advisories followed archives' symlinks and tags). berth checkpoints
// (CheckpointContainer writes an archive, or says CRIU does not work
// here) but restores nothing: an image reference that is a path to an
// archive on the host must be refused as a reference, never opened. The
// day berth restores checkpoints this test must try the attack itself,
// an archive whose mounts name host paths the pod never had.
func TestCRIO_CVE_2024_8676_CheckpointRestore(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	pod, podCfg := e.RunPod("cve-2024-8676")
	id := e.mustStart(pod, podCfg, e.ctr("checkpointed", ""))
	_, err := e.D.Runtime.CheckpointContainer(framework.Ctx(t), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: victim.Dir + "/checkpoint.tar"})
	if err != nil && !strings.Contains(err.Error(), "checkpoint/restore support not available") {
		t.Errorf("CheckpointContainer: %v", err)
	}
	t.Logf("CheckpointContainer: %v", err)
	// A real image archive there (busybox, docker save's format): were
	// berth to open the path, the container would run.
	archive := victim.Dir + "/checkpoint.tar"
	tag, err := name.NewTag("restored/busybox:latest")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(archive, tag, e.busybox()); err != nil {
		t.Fatal(err)
	}
	victim.before = snapshot(victim.Dir)
	for _, ref := range []string{archive, "file://" + archive, "oci-archive:" + archive} {
		c := e.ctr("restored", ref)
		c.Mounts = []*runtimeapi.Mount{bind(victim.Dir, "/restored")}
		if id, err := e.start(pod, podCfg, c); err == nil {
			t.Errorf("a container from %q runs", ref)
			e.remove(id)
		} else {
			t.Logf("%s: %v", ref, err)
		}
	}
	victim.check(t)
}
