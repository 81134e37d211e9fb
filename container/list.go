package container

import (
	"context"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// List is ListContainers with every CRI filter.
func (s *Service) List(ctx context.Context, f *runtimeapi.ContainerFilter) []*runtimeapi.Container {
	ls := s.listed(f)
	out := make([]*runtimeapi.Container, 0, len(ls))
	for _, l := range ls {
		out = append(out, listItem(l.cfg, &l.key))
	}
	return out
}

// ListResponse is List as the response the CRI server sends, with each
// item already encoded, as sandbox.Manager.ListResponse does for pods: the
// kubelet lists every container every second (PLEG), and encoding the
// items' labels and annotations is most of what such a call costs. Each
// container keeps its item encoded until its state changes; the response
// carries the items as pre-encoded field 1 (containers) in its unknown
// fields, which protobuf writes out as they are: on the wire it is the
// same message. In memory its Containers is empty: use List to read them.
func (s *Service) ListResponse(ctx context.Context, f *runtimeapi.ContainerFilter) *runtimeapi.ListContainersResponse {
	ls := s.listed(f)
	size := 0
	wires := make([][]byte, len(ls))
	for i, l := range ls {
		wires[i] = l.c.encodedItem(l.cfg, &l.key)
		size += len(wires[i])
	}
	raw := make([]byte, 0, size)
	for _, w := range wires {
		raw = append(raw, w...)
	}
	resp := &runtimeapi.ListContainersResponse{}
	if len(raw) > 0 {
		resp.ProtoReflect().SetUnknown(raw)
	}
	return resp
}

// listKey is what a container's list item holds besides its config
// (immutable): an encoded item is reused while its key is unchanged.
type listKey struct {
	id, podID, imageRef, imageID string
	state                        runtimeapi.ContainerState
	createdAt                    int64
}

// listEntry is a container's encoded ListContainers item, for one key.
type listEntry struct {
	key  listKey
	wire []byte // tag and length of field "containers", then the Container
}

// containersField is the field number of ListContainersResponse.containers.
var containersField = (&runtimeapi.ListContainersResponse{}).ProtoReflect().Descriptor().Fields().ByName("containers").Number()

func (c *ctr) encodedItem(cfg *runtimeapi.ContainerConfig, key *listKey) []byte {
	if e := c.listed.Load(); e != nil && e.key == *key {
		return e.wire
	}
	b, err := proto.Marshal(listItem(cfg, key))
	if err != nil {
		// Cannot happen with these types; an empty item is still valid.
		b = nil
	}
	wire := protowire.AppendTag(make([]byte, 0, len(b)+8), containersField, protowire.BytesType)
	wire = protowire.AppendBytes(wire, b)
	c.listed.Store(&listEntry{key: *key, wire: wire})
	return wire
}

func listItem(cfg *runtimeapi.ContainerConfig, k *listKey) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: k.id, PodSandboxId: k.podID, Metadata: cfg.GetMetadata(),
		Image: cfg.GetImage(), ImageRef: k.imageRef, ImageId: k.imageID,
		State: k.state, CreatedAt: k.createdAt,
		Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
	}
}

type listedCtr struct {
	c   *ctr
	cfg *runtimeapi.ContainerConfig
	key listKey
}

// listed returns the containers that match f.
func (s *Service) listed(f *runtimeapi.ContainerFilter) []listedCtr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []listedCtr
	for _, c := range s.ctrs {
		c.mu.RLock()
		r := &c.rec
		ok := r.State != StateCreating && !r.Sandbox &&
			(f.GetId() == "" || strings.HasPrefix(r.ID, f.GetId())) &&
			(f.GetPodSandboxId() == "" || strings.HasPrefix(r.PodID, f.GetPodSandboxId())) &&
			(f.GetState() == nil || f.GetState().GetState() == criState(c)) &&
			matchLabels(c.cfg.GetLabels(), f.GetLabelSelector())
		if ok {
			out = append(out, listedCtr{c: c, cfg: c.cfg, key: listKey{
				id: r.ID, podID: r.PodID, imageRef: r.ImageRef, imageID: r.ImageID,
				state: criState(c), createdAt: r.CreatedAt,
			}})
		}
		c.mu.RUnlock()
	}
	return out
}
