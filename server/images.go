package server

import (
	"context"
	"errors"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/idindex"
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

// imageError maps the image service's errors to gRPC codes. A full disk
// is ResourceExhausted (gRPC's own example of the code: a caller can tell
// it from a registry's fault without parsing the text); other registry
// and disk failures are Unknown, as other CRI runtimes report them.
func imageError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, image.ErrInvalidReference), errors.Is(err, idindex.ErrAmbiguous):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, image.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, image.ErrUnauthorized):
		return status.Error(codes.Unauthenticated, err.Error())
	case diskFull(err):
		return status.Error(codes.ResourceExhausted, err.Error())
	default:
		return status.Error(codes.Unknown, err.Error())
	}
}

// diskFull tells a failure for want of disk space (or quota), which every
// service reports as ResourceExhausted.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
