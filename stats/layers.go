package stats

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// WritableLayers is what all containers' writable layers use together, on
// the filesystem that holds LayerRoot: the container filesystem of
// ImageFsInfo when it is not imageFS, the image store's mount point (the
// split image filesystem of KEP-4191). It walks LayerRoot as one
// directory, cached as a layer's walk is; nil, walking nothing, when the
// layers share imageFS or there is no LayerRoot.
func (c *Collector) WritableLayers(ctx context.Context, imageFS string) (*runtimeapi.FilesystemUsage, error) {
	if c.opts.LayerRoot == "" || c.layerFS == imageFS {
		return nil, nil
	}
	b, n, at, err := c.disk.get(ctx, c.opts.LayerRoot, time.Now())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.FilesystemUsage{
		Timestamp:  at.UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: c.layerFS},
		UsedBytes:  &runtimeapi.UInt64Value{Value: b},
		InodesUsed: &runtimeapi.UInt64Value{Value: n},
	}, nil
}
