package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/image"
)

// ImageStatus describes one image. A missing image is not an error: CRI
// wants an empty answer, which is how the kubelet learns it must pull.
func (s *Server) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	if s.images == nil {
		return nil, errNoImages
	}
	ref, err := s.imageRef(req.GetImage())
	if err != nil {
		return nil, err
	}
	img, err := s.images.Status(ref)
	if errors.Is(err, image.ErrNotFound) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &runtimeapi.ImageStatusResponse{Image: criImage(img)}
	if req.GetVerbose() {
		info, err := verboseImageInfo(img)
		if err != nil {
			return nil, rpcError(err)
		}
		resp.Info = map[string]string{"info": info}
	}
	return resp, nil
}

func criImage(img image.Image) *runtimeapi.Image {
	out := &runtimeapi.Image{
		Id:          img.ID,
		RepoTags:    img.RepoTags,
		RepoDigests: img.RepoDigests,
		Size:        uint64(img.Size),
		Username:    img.Username,
		Spec:        &runtimeapi.ImageSpec{Image: img.ID},
		Pinned:      img.Pinned,
	}
	if img.UID != nil {
		out.Uid = &runtimeapi.Int64Value{Value: *img.UID}
	}
	return out
}

// verboseImageInfo is the "info" entry of a verbose status: the image
// config as the registry served it, plus where the layers are.
func verboseImageInfo(img image.Image) (string, error) {
	type layer struct {
		ChainID string `json:"chainID"`
		DiffID  string `json:"diffID"`
		Digest  string `json:"digest"`
		Dir     string `json:"dir"`
	}
	info := struct {
		ID             string          `json:"id"`
		ManifestDigest string          `json:"manifestDigest"`
		Pulled         string          `json:"pulled"`
		Layers         []layer         `json:"layers"`
		ImageSpec      json.RawMessage `json:"imageSpec"`
	}{ID: img.ID, ManifestDigest: img.ManifestDigest, Pulled: img.Pulled.Format("2006-01-02T15:04:05Z07:00"), ImageSpec: img.Config}
	for _, l := range img.Layers {
		info.Layers = append(info.Layers, layer{ChainID: l.ChainID, DiffID: l.DiffID, Digest: l.Digest, Dir: l.Dir})
	}
	b, err := json.Marshal(info)
	if err != nil {
		return "", fmt.Errorf("verbose status of %s: %w", img.ID, err)
	}
	return string(b), nil
}
