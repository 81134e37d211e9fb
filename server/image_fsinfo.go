package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageFsInfo reports what the image store uses, from memory. The
// containers' writable layers are reported apart only when they are on
// a filesystem of their own (KEP-4191's split image filesystem, a disk
// mounted at <root>/containers): the kubelet then garbage-collects and
// evicts for each disk on its own. On one filesystem it takes them to
// share the image filesystem.
func (s *Server) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	if s.images == nil {
		return nil, errNoImages
	}
	u := s.images.FsInfo()
	resp := &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			Timestamp:  u.Timestamp.UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: u.Mountpoint},
			UsedBytes:  &runtimeapi.UInt64Value{Value: u.UsedBytes},
			InodesUsed: &runtimeapi.UInt64Value{Value: u.InodesUsed},
		}},
	}
	if s.stats == nil {
		return resp, nil
	}
	layers, err := s.stats.WritableLayers(ctx, u.Mountpoint)
	if err != nil {
		return nil, rpcError(err)
	}
	if layers != nil {
		resp.ContainerFilesystems = []*runtimeapi.FilesystemUsage{layers}
	}
	return resp, nil
}
