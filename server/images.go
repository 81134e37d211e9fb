package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/image"
)

// Images is the image service, as *image.Service implements it.
type Images interface {
	Pull(ctx context.Context, ref string, auth *image.AuthConfig) (string, error)
	Status(ref string) (image.Image, error)
	List(filter string) []image.Image
	Remove(ctx context.Context, ref string) error
	FsInfo() image.FsUsage
}

var errNoImages = status.Error(codes.Unimplemented, "images are not enabled in this server")

// imageRef is the reference an ImageSpec names. Every handler shares one
// image store, so an image pulled for one serves them all; a
// runtime_handler (KEP-4216) that is not configured is refused, as
// RunPodSandbox refuses it, rather than pulled for nothing.
func (s *Server) imageRef(spec *runtimeapi.ImageSpec) (string, error) {
	ref := spec.GetImage()
	if ref == "" {
		return "", status.Error(codes.InvalidArgument, "image.image is required")
	}
	if h := spec.GetRuntimeHandler(); h != "" {
		if _, ok := s.cfg.Handler(h); !ok {
			return "", invalidf("image.runtime_handler %q is not configured: this berth's handlers are %s (the config's [runtimes] tables)", h, s.knownHandlers())
		}
	}
	return ref, nil
}
