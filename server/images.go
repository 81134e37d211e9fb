package server

import (
	"context"
	"errors"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
