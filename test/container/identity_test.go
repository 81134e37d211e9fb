package container_test

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestImageIdentity checks the one image identity the kubelet's pull
// credential verification (KEP-2535) matches its pull records on:
// PullImage's image_ref, Image.id, Container.image_id and
// ContainerStatus.image_id are the same string, by tag and by digest, and
// stay so after berth restarts.
func TestImageIdentity(t *testing.T) {
	e := newEnv(t)
	ctx := framework.Ctx(t)
	pulled, err := e.d.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: e.image}})
	if err != nil {
		t.Fatal(err)
	}
	ref := pulled.ImageRef
	podCfg := e.podConfig("identity")
	pod := e.runPod(podCfg)
	id := e.run(pod, podCfg, e.ctrConfig("c", "sleep 300"))

	check := func(when string) {
		t.Helper()
		st, err := e.d.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: e.image}})
		if err != nil || st.Image == nil {
			t.Fatalf("%s: ImageStatus %s: %v %v", when, e.image, st, err)
		}
		if st.Image.Id != ref {
			t.Errorf("%s: Image.id %q, PullImage said %q", when, st.Image.Id, ref)
		}
		// The digest form names the same image.
		for _, d := range st.Image.RepoDigests {
			again, err := e.d.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: d}})
			if err != nil || again.ImageRef != ref {
				t.Errorf("%s: PullImage %s: %v %v, want %q", when, d, again, err, ref)
			}
		}
		if got := e.status(id).ImageId; got != ref {
			t.Errorf("%s: ContainerStatus.image_id %q, want %q", when, got, ref)
		}
		list, err := e.d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
		if err != nil || len(list.Containers) != 1 || list.Containers[0].ImageId != ref {
			t.Errorf("%s: ListContainers: %v %v, want image_id %q", when, list, err, ref)
		}
	}
	check("before restart")
	e.d.Restart()
	check("after restart")
}

// TestEnvValueBytes: env values are bytes since cri-api v0.37. A NUL is
// refused by name; other bytes reach the process as the spec carries them
// (JSON, to libcontainer and its init): invalid UTF-8 arrives as U+FFFD,
// as with containerd and runc.
func TestEnvValueBytes(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("envbytes")
	pod := e.runPod(podCfg)

	bad := e.ctrConfig("nul", "true")
	bad.Envs = []*runtimeapi.KeyValue{{Key: "SECRET", Value: []byte("a\x00b")}}
	_, err := e.d.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "envs[0].value") || !strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("CreateContainer with a NUL in an env value: %v, want InvalidArgument naming envs[0].value and SECRET", err)
	}

	cfg := e.ctrConfig("bytes", "sleep 300")
	cfg.Envs = []*runtimeapi.KeyValue{
		{Key: "PLAIN", Value: []byte("h\u00e9llo w=rld")},
		{Key: "BINARY", Value: []byte("x\xff\xfey")},
	}
	id := e.run(pod, podCfg, cfg)
	environ := e.exec(id, 10, "cat", "/proc/1/environ").Stdout
	for _, want := range [][]byte{[]byte("PLAIN=h\u00e9llo w=rld\x00"), []byte("BINARY=x\ufffd\ufffdy\x00")} {
		if !bytes.Contains(environ, want) {
			t.Errorf("the process's environment %q lacks %q", environ, want)
		}
	}
}
