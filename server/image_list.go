package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListImages lists every image, or the one the filter names.
func (s *Server) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	if s.images == nil {
		return nil, errNoImages
	}
	imgs := s.images.List(req.GetFilter().GetImage().GetImage())
	out := make([]*runtimeapi.Image, len(imgs))
	for i, img := range imgs {
		out[i] = criImage(img)
	}
	return &runtimeapi.ListImagesResponse{Images: out}, nil
}
