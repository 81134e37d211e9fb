package container

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestStatusImage(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *runtimeapi.ImageSpec
		want string
	}{
		{"kubelet: id plus the name the pod spec gave", &runtimeapi.ImageSpec{Image: "sha256:b206f9a9", UserSpecifiedImage: "registry.k8s.io/e2e-test-images/agnhost:2.66.1"}, "registry.k8s.io/e2e-test-images/agnhost:2.66.1"},
		{"crictl: a name only", &runtimeapi.ImageSpec{Image: "busybox:1.37"}, "busybox:1.37"},
		{"no image", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statusImage(tc.in)
			if got.GetImage() != tc.want {
				t.Errorf("image = %q, want %q", got.GetImage(), tc.want)
			}
			if tc.in != nil && tc.in.GetUserSpecifiedImage() != "" && tc.in.Image == tc.want {
				t.Errorf("the container's own config was changed")
			}
		})
	}
}
