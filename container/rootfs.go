package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// mountRootfs mounts the image's layers with a private writable layer on
// top. The upper layer lives under the persistent root, not on the state
// tmpfs, so a container writing a lot does not eat the node's memory.
// With idm (a pod in its own user namespace) the layers are id-mapped
// into the pod's user namespace and the writable layer's root belongs to
// the pod's root.
func mountRootfs(id string, lower []string, upper, target string, idm *idmap) error {
	if len(lower) == 0 {
		return fmt.Errorf("container %s: image has no layers", id)
	}
	for _, d := range []string{filepath.Join(upper, "upper"), filepath.Join(upper, "work"), target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("container %s: %w", id, err)
		}
	}
	if idm != nil {
		mapped, done, err := idm.layers("rootfs", lower)
		if err != nil {
			return fmt.Errorf("container %s: %w", id, err)
		}
		defer done()
		lower = mapped
		if err := os.Chown(filepath.Join(upper, "upper"), int(idm.uid), int(idm.gid)); err != nil {
			return fmt.Errorf("container %s: %w", id, err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s",
		strings.Join(lower, ":"), filepath.Join(upper, "upper"), filepath.Join(upper, "work"))
	if len(opts) >= unix.Getpagesize() {
		return fmt.Errorf("container %s: %d image layers are too many for one overlay mount", id, len(lower))
	}
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("container %s: mount rootfs: %w", id, err)
	}
	return nil
}

// makeContainerDir makes a container's state dir (rootfs mountpoint,
// spec, image volumes) root's only: through a dir others may search, a
// host user who learns the container's id (its cgroup path shows it)
// could read and write the running container's files, e.g. plant files
// in its /tmp. With idm (its own user namespace) the container's root is
// an unprivileged host uid that reaches its rootfs and volumes by path
// while runc sets them up: the dir is then searchable by that root's
// host group, as containerd does with a bundle.
func makeContainerDir(dir string, idm *idmap) error {
	mode, gid := os.FileMode(0o700), 0
	if idm != nil {
		mode, gid = 0o710, int(idm.gid)
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	if err := os.Chown(dir, 0, gid); err != nil {
		return err
	}
	// MkdirAll leaves the mode of a dir that already exists alone.
	return os.Chmod(dir, mode)
}

// restrictContainerDir gives the dir of a container made by an older
// berth (0755) the mode makeContainerDir gives new ones: 0700, or 0710
// when it belongs to a user namespace's host group.
func restrictContainerDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	mode := os.FileMode(0o700)
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Gid != 0 {
		mode = 0o710
	}
	if st.Mode().Perm() == mode {
		return nil
	}
	return os.Chmod(dir, mode)
}

// unmountRootfs is idempotent: a target that is not mounted (or is gone)
// is fine.
func unmountRootfs(target string) error {
	err := unix.Unmount(target, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", target, err)
}

// unmountContainerDir unmounts everything a create mounts under a
// container's state dir (rootfs, image volumes, id-mapped layers),
// whatever the record says: it runs before the dir is removed, and a
// removal must never reach into a mount.
func unmountContainerDir(dir string) error {
	if err := unmountRootfs(filepath.Join(dir, "rootfs")); err != nil {
		return err
	}
	if err := unmountImageVolumes(dir); err != nil {
		return fmt.Errorf("image volumes: %w", err)
	}
	if err := unmountIDMapScratch(dir); err != nil {
		return fmt.Errorf("id-mapped layers: %w", err)
	}
	return nil
}

// unmountEach unmounts the entries of dir that want accepts (every one
// with a nil want); a dir that does not exist has none.
func unmountEach(dir string, want func(os.DirEntry) bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if want == nil || want(e) {
			errs = append(errs, unmountRootfs(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}
