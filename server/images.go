package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
