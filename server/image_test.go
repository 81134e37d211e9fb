package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/idindex"
)

type fakeImages struct {
	err  error
	img  image.Image
	auth *image.AuthConfig
}

func (f *fakeImages) Pull(_ context.Context, ref string, auth *image.AuthConfig) (string, error) {
	f.auth = auth
	return f.img.ID, f.err
}
func (f *fakeImages) Status(string) (image.Image, error) { return f.img, f.err }
func (f *fakeImages) List(string) []image.Image          { return []image.Image{f.img} }
func (f *fakeImages) Remove(context.Context, string) error {
	return f.err
}
func (f *fakeImages) FsInfo() image.FsUsage {
	return image.FsUsage{Timestamp: time.Unix(1, 0), Mountpoint: "/", UsedBytes: 10, InodesUsed: 2}
}

func TestImageErrorCodes(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("pull x: %w", image.ErrInvalidReference), codes.InvalidArgument},
		{fmt.Errorf("pull x: %w", image.ErrNotFound), codes.NotFound},
		{fmt.Errorf("image %w", &idindex.AmbiguousError{Prefix: "0", IDs: []string{"sha256:0a", "sha256:0b"}}), codes.InvalidArgument},
		{fmt.Errorf("pull x: %w", image.ErrUnauthorized), codes.Unauthenticated},
		{fmt.Errorf("pull x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("pull x: %w", context.Canceled), codes.Canceled},
		{fmt.Errorf("pull x: %w", image.ErrStalled), codes.Unknown},
		{errors.New("disk full"), codes.Unknown},
		{fmt.Errorf("pull x: write y: %w", syscall.ENOSPC), codes.ResourceExhausted},
	}
	for _, tt := range tests {
		f := &fakeImages{err: tt.err}
		s, _ := newTestServer(t, func(o *Options) { o.Images = f })
		_, err := s.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x"}})
		if status.Code(err) != tt.want {
			t.Errorf("%v: code %s, want %s", tt.err, status.Code(err), tt.want)
		}
		_, err = s.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "x"}})
		if status.Code(err) != tt.want {
			t.Errorf("remove %v: code %s, want %s", tt.err, status.Code(err), tt.want)
		}
	}
}

func TestImageRequestsValidated(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.Images = &fakeImages{} })
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"pull": func() error { _, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{}); return err },
		"status": func() error {
			_, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{}})
			return err
		},
		"remove": func() error { _, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{}); return err },
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s without an image: %v, want InvalidArgument", name, err)
		}
	}
}

func TestImageStatus(t *testing.T) {
	uid := int64(1002)
	f := &fakeImages{img: image.Image{
		ID: "sha256:abc", RepoTags: []string{"docker.io/library/a:1"}, Size: 42, UID: &uid, Pinned: true,
		Config: []byte(`{"config":{"User":"1002"}}`),
	}}
	s, _ := newTestServer(t, func(o *Options) { o.Images = f })
	ctx := context.Background()
	resp, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "a:1"}, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	img := resp.GetImage()
	if img.GetId() != "sha256:abc" || img.GetSize() != 42 || img.GetUid().GetValue() != 1002 || !img.GetPinned() || img.GetSpec().GetImage() != "sha256:abc" {
		t.Errorf("status %+v", img)
	}
	var info struct {
		ImageSpec struct{ Config struct{ User string } } `json:"imageSpec"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.ImageSpec.Config.User != "1002" {
		t.Errorf("verbose info %q: %v", resp.GetInfo()["info"], err)
	}

	f.err = fmt.Errorf("x: %w", image.ErrNotFound)
	resp, err = s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "a:1"}})
	if err != nil || resp.GetImage() != nil {
		t.Errorf("missing image: %v, %v; want an empty answer", resp, err)
	}

	// An ID prefix of two images is no missing image: the kubelet must
	// not be told to pull.
	f.err = fmt.Errorf("image %w", &idindex.AmbiguousError{Prefix: "0", IDs: []string{"sha256:0a", "sha256:0b"}})
	if _, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "sha256:0"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ambiguous image: %v; want InvalidArgument", err)
	}

	fs, err := s.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil || len(fs.GetImageFilesystems()) != 1 || fs.GetImageFilesystems()[0].GetFsId().GetMountpoint() != "/" {
		t.Errorf("fs info %v, %v", fs, err)
	}
}

func TestPullPassesAuth(t *testing.T) {
	f := &fakeImages{img: image.Image{ID: "sha256:abc"}}
	s, _ := newTestServer(t, func(o *Options) { o.Images = f })
	resp, err := s.PullImage(context.Background(), &runtimeapi.PullImageRequest{
		Image: &runtimeapi.ImageSpec{Image: "a"},
		Auth:  &runtimeapi.AuthConfig{Username: "u", Password: "p", ServerAddress: "r", IdentityToken: "i", RegistryToken: "t", Auth: "x"},
	})
	if err != nil || resp.GetImageRef() != "sha256:abc" {
		t.Fatal(resp, err)
	}
	want := image.AuthConfig{Username: "u", Password: "p", ServerAddress: "r", IdentityToken: "i", RegistryToken: "t", Auth: "x"}
	if f.auth == nil || *f.auth != want {
		t.Errorf("auth %+v", f.auth)
	}
}

func TestImagesUnimplementedWithoutService(t *testing.T) {
	s, _ := newTestServer(t, nil)
	_, err := s.ListImages(context.Background(), &runtimeapi.ListImagesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("got %v", err)
	}
}

// TestImageRuntimeHandler: ImageSpec.runtime_handler (KEP-4216) names a
// configured handler or is refused by name before anything is pulled.
func TestImageRuntimeHandler(t *testing.T) {
	f := &fakeImages{img: image.Image{ID: "sha256:aa"}}
	s, _ := newTestServer(t, func(o *Options) { o.Images = f })
	ctx := context.Background()
	for _, tc := range []struct {
		handler string
		want    codes.Code
	}{{"", codes.OK}, {"runc", codes.OK}, {"berth", codes.OK}, {"kata", codes.InvalidArgument}} {
		spec := &runtimeapi.ImageSpec{Image: "x", RuntimeHandler: tc.handler}
		_, pullErr := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec})
		_, statusErr := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
		_, removeErr := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec})
		for name, err := range map[string]error{"PullImage": pullErr, "ImageStatus": statusErr, "RemoveImage": removeErr} {
			if status.Code(err) != tc.want {
				t.Errorf("%s with runtime_handler %q: %v, want %s", name, tc.handler, err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), `image.runtime_handler "kata"`) {
				t.Errorf("%s: %v does not name the handler", name, err)
			}
		}
	}
}
