package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage removes an image with all its tags; removing a missing
// image succeeds.
func (s *Server) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	if s.images == nil {
		return nil, errNoImages
	}
	ref, err := s.imageRef(req.GetImage())
	if err != nil {
		return nil, err
	}
	if err := s.images.Remove(ctx, ref); err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}
