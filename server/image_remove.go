package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage removes an image with all its tags; removing a missing
// image succeeds.
func (s *Server) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	if s.images == nil {
		return nil, errNoImages
	}
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, status.Error(codes.InvalidArgument, "image.image is required")
	}
	if err := s.images.Remove(ctx, ref); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}
