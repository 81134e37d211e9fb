package image_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

func TestAuth(t *testing.T) {
	registry(t)
	host, user, password := os.Getenv("BERTH_TEST_AUTH_REGISTRY"), os.Getenv("BERTH_TEST_AUTH_USER"), os.Getenv("BERTH_TEST_AUTH_PASSWORD")
	if host == "" || user == "" {
		t.Skip("needs BERTH_TEST_AUTH_REGISTRY, BERTH_TEST_AUTH_USER and BERTH_TEST_AUTH_PASSWORD (hack/registry sets them)")
	}
	ref := host + "/library/busybox:latest"
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	tests := []struct {
		name   string
		config string
		auth   *runtimeapi.AuthConfig
		ok     bool
	}{
		{name: "no credentials"},
		{name: "wrong password", auth: &runtimeapi.AuthConfig{Username: user, Password: "wrong"}},
		{name: "username and password", auth: &runtimeapi.AuthConfig{Username: user, Password: password}, ok: true},
		{name: "auth", auth: &runtimeapi.AuthConfig{Auth: basic, ServerAddress: host}, ok: true},
		{name: "from the config", config: fmt.Sprintf("[registries.%q]\nusername = %q\npassword = %q\n", host, user, password), ok: true},
		{name: "wrong in the config", config: fmt.Sprintf("[registries.%q]\nauth = %q\n", host, base64.StdEncoding.EncodeToString([]byte(user+":nope")))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := framework.StartDaemon(t, framework.WithConfig(tt.config))
			_, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(ref), Auth: tt.auth})
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if grpcstatus.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "credentials") {
				t.Errorf("pull: %v; want Unauthenticated saying the credentials were refused", err)
			}
			if err != nil && strings.Contains(err.Error(), password) {
				t.Errorf("error shows the password: %v", err)
			}
			assertNoTrace(t, d)
		})
	}
}
