package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
)

// ImageVolume is a CRI mount of an image (image volume, KEP 4639): the
// image's layers, leased by the container, mounted read-only on the host
// under the container's state dir and bind-mounted into the container.
type ImageVolume struct {
	// Mount is the index of the mount in the container's config.
	Mount int `json:"mount"`
	// Holder is the image lease's holder: <container id>.mount<index>.
	Holder string `json:"holder"`
	// Dir is the mountpoint of the image's read-only overlay.
	Dir string `json:"dir"`
	// ImageID is the mounted image's ID, reported as the mount's
	// image_ref in ContainerStatus.
	ImageID string `json:"imageId,omitempty"`
}

// volumesDir holds the image volumes' mountpoints in a container's state
// dir, one per mount index.
const volumesDir = "volumes"

func volumeHolder(id string, mount int) string { return id + ".mount" + strconv.Itoa(mount) }

// holderContainer is the container a lease holder belongs to: the holder
// itself (the container's image) or <id>.mount<i> (an image volume).
func holderContainer(holder string) string {
	id, _, _ := strings.Cut(holder, ".")
	return id
}

// planImageVolumes checks the config's image mounts and names what each
// will hold, before anything is done: the record lists them from its
// first write, so that an undo or a recovery releases each one.
func planImageVolumes(id, dir string, cfg *runtimeapi.ContainerConfig) ([]ImageVolume, error) {
	var vols []ImageVolume
	for i, m := range cfg.GetMounts() {
		if !spec.IsImageMount(m) {
			continue
		}
		if err := spec.CheckImageMount(fmt.Sprintf("mounts[%d]", i), m); err != nil {
			return nil, fmt.Errorf("%w: container %s: %w", ErrInvalid, id, err)
		}
		vols = append(vols, ImageVolume{
			Mount: i, Holder: volumeHolder(id, i),
			Dir: filepath.Join(dir, volumesDir, strconv.Itoa(i)),
		})
	}
	return vols, nil
}

// leaseImageVolumes leases the image of each volume, filling in its ID;
// it returns each image's layers. A failure releases nothing: the
// caller's undo does (releaseImageVolumes).
func (s *Service) leaseImageVolumes(ctx context.Context, cfg *runtimeapi.ContainerConfig, vols []ImageVolume) ([][]string, error) {
	layers := make([][]string, len(vols))
	for k := range vols {
		v := &vols[k]
		name := cfg.GetMounts()[v.Mount].GetImage().GetImage()
		img, err := s.opts.Images.Lease(ctx, v.Holder, name)
		if err != nil {
			return nil, fmt.Errorf("mounts[%d].image: %s: %w", v.Mount, name, err)
		}
		v.ImageID = img.ID
		layers[k] = img.LowerDirs
	}
	return layers, nil
}

// mountImageVolumes mounts each leased image read-only and returns what
// the spec binds for each mount: the mountpoint, or the image's sub path
// under it.
func mountImageVolumes(cfg *runtimeapi.ContainerConfig, vols []ImageVolume, layers [][]string, idm *idmap) (map[int]string, error) {
	if len(vols) == 0 {
		return nil, nil
	}
	out := make(map[int]string, len(vols))
	for k, v := range vols {
		m := cfg.GetMounts()[v.Mount]
		if err := mountImageReadOnly(layers[k], v.Dir, idm); err != nil {
			return nil, fmt.Errorf("mounts[%d]: image %s: %w", v.Mount, m.GetImage().GetImage(), err)
		}
		src := v.Dir
		if sub := m.GetImageSubPath(); sub != "" {
			var err error
			if src, err = resolveInRoot(v.Dir, sub); err != nil {
				return nil, fmt.Errorf("%w: mounts[%d].image_sub_path: %q in image %s: %w",
					ErrInvalid, v.Mount, sub, m.GetImage().GetImage(), err)
			}
		}
		out[v.Mount] = src
	}
	return out, nil
}

// mountImageReadOnly mounts an image's layers (top first) at target as a
// read-only overlay: no upper layer, whiteouts applied. Overlay needs two
// lower layers when it has no upper one, so a one-layer image gets an
// empty second. With idm, the layers are id-mapped into the pod's user
// namespace.
func mountImageReadOnly(lower []string, target string, idm *idmap) error {
	if len(lower) == 0 {
		return errors.New("image has no layers")
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if idm != nil {
		mapped, done, err := idm.layers("volume-"+filepath.Base(target), lower)
		if err != nil {
			return err
		}
		defer done()
		lower = mapped
	}
	if len(lower) == 1 {
		empty := target + ".empty"
		if err := os.MkdirAll(empty, 0o755); err != nil {
			return err
		}
		lower = []string{lower[0], empty}
	}
	opts := "lowerdir=" + strings.Join(lower, ":")
	if len(opts) >= unix.Getpagesize() {
		return fmt.Errorf("%d image layers are too many for one overlay mount", len(lower))
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY, opts); err != nil {
		return fmt.Errorf("mount read-only overlay: %w", err)
	}
	return nil
}

// resolveInRoot resolves path inside root as if root were "/": symlinks
// and ".." never leave it (openat2 RESOLVE_IN_ROOT). It returns the
// resolved host path, which must exist. The tree is a read-only image, so
// the answer stays true after this returns.
func resolveInRoot(root, path string) (string, error) {
	dirfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat2(dirfd, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return "", errors.New("does not exist in the image")
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if real != root && !strings.HasPrefix(real, root+"/") {
		return "", fmt.Errorf("resolves to %s, outside the image", real)
	}
	return real, nil
}

// unmountImageVolumes unmounts every image volume under a container's
// state dir, whatever the record says: it runs before the dir is
// removed, and a removal must never reach into a mounted image.
func unmountImageVolumes(dir string) error {
	return unmountEach(filepath.Join(dir, volumesDir), func(e os.DirEntry) bool {
		return e.IsDir() && !strings.HasSuffix(e.Name(), ".empty")
	})
}

// releaseImageVolumes drops the leases of a container's image volumes.
func (s *Service) releaseImageVolumes(ctx context.Context, vols []ImageVolume) error {
	var errs []error
	for _, v := range vols {
		errs = append(errs, s.opts.Images.Release(ctx, v.Holder))
	}
	return errors.Join(errs...)
}

// statusMounts are the config's mounts as ContainerStatus reports them:
// an image mount carries the ID of the image it mounts (image_ref).
func statusMounts(mounts []*runtimeapi.Mount, vols []ImageVolume) []*runtimeapi.Mount {
	if len(vols) == 0 {
		return mounts
	}
	out := append([]*runtimeapi.Mount(nil), mounts...)
	for _, v := range vols {
		if v.Mount >= len(out) || out[v.Mount].GetImage() == nil {
			continue
		}
		m := proto.Clone(out[v.Mount]).(*runtimeapi.Mount)
		m.Image.ImageRef = v.ImageID
		out[v.Mount] = m
	}
	return out
}
