package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageFsInfo reports what the image store uses, from memory. Containers'
// writable layers are not reported separately: the kubelet then takes them
// to share the image filesystem.
func (s *Server) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	if s.images == nil {
		return nil, errNoImages
	}
	u := s.images.FsInfo()
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			Timestamp:  u.Timestamp.UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: u.Mountpoint},
			UsedBytes:  &runtimeapi.UInt64Value{Value: u.UsedBytes},
			InodesUsed: &runtimeapi.UInt64Value{Value: u.InodesUsed},
		}},
	}, nil
}
