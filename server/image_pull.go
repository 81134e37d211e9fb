package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/image"
)

// PullImage pulls an image and answers its ID, the config digest.
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	if s.images == nil {
		return nil, errNoImages
	}
	ref, err := s.imageRef(req.GetImage())
	if err != nil {
		return nil, err
	}
	var auth *image.AuthConfig
	if a := req.GetAuth(); a != nil {
		auth = &image.AuthConfig{
			Username:      a.GetUsername(),
			Password:      a.GetPassword(),
			Auth:          a.GetAuth(),
			ServerAddress: a.GetServerAddress(),
			IdentityToken: a.GetIdentityToken(),
			RegistryToken: a.GetRegistryToken(),
		}
	}
	id, err := s.images.Pull(ctx, ref, auth)
	if err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.PullImageResponse{ImageRef: id}, nil
}
