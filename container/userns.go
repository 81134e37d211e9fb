package container

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/monitor"
)

// User namespaces (mode POD): pause is cloned into the pod's user
// namespace, with new network, IPC, UTS and PID namespaces that it owns;
// containers join them all. Their files are id-mapped so that what the
// host's root owns belongs to the pod's root: image layers through
// id-mapped mounts under the overlay (overlayfs itself cannot be
// id-mapped), bind mounts through libcontainer's "idmap" option, and the
// writable layer's root is chowned to the pod's root.

// podUserNS is the pod's own user namespace, nil when it shares the
// node's.
func podUserNS(podCfg *runtimeapi.PodSandboxConfig) *runtimeapi.UserNamespace {
	u := podCfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if u == nil || u.GetMode() != runtimeapi.NamespaceMode_POD {
		return nil
	}
	return u
}

// idmap id-maps image layers into a user namespace for one container.
type idmap struct {
	userns   *os.File // the pod's user namespace (pause's)
	uid, gid uint32   // host ids of the pod's root
	scratch  string   // <container dir>/idmap: where the mapped layers are mounted
}

// openIDMap opens the user namespace of the pod's pause.
func openIDMap(u *runtimeapi.UserNamespace, pausePID int, dir string) (*idmap, error) {
	if pausePID <= 0 {
		return nil, errors.New("the pod has no pause process holding its user namespace")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pausePID))
	if err != nil {
		return nil, fmt.Errorf("open the pod's user namespace: %w", err)
	}
	uid, gid := spec.HostRoot(u)
	return &idmap{userns: f, uid: uid, gid: gid, scratch: filepath.Join(dir, idmapDir)}, nil
}

func (m *idmap) close() {
	if m != nil {
		m.userns.Close()
	}
}

// idmapDir holds a container's id-mapped layers while its overlays are
// mounted on them.
const idmapDir = "idmap"

// layers mounts an id-mapped, read-only view of each layer under the
// scratch dir (name-<k>) and returns their paths, for an overlay to be
// mounted on. done unmounts them: the overlay keeps what it uses.
func (m *idmap) layers(name string, lower []string) (mapped []string, done func(), err error) {
	var dirs []string
	done = func() {
		for _, d := range dirs {
			unix.Unmount(d, unix.MNT_DETACH)
			os.Remove(d)
		}
	}
	defer func() {
		if err != nil {
			done()
		}
	}()
	for k, layer := range lower {
		d := filepath.Join(m.scratch, name+"-"+strconv.Itoa(k))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, nil, err
		}
		dirs = append(dirs, d)
		if err := idmapMount(layer, d, int(m.userns.Fd())); err != nil {
			return nil, nil, fmt.Errorf("id-map layer %s: %w", layer, err)
		}
	}
	return dirs, done, nil
}

// idmapMount mounts a read-only, id-mapped clone of src at dst (to
// attach, -1 only checks that src's filesystem allows it).
func idmapMount(src, dst string, userns int) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("mount_setattr id-map: %w", err)
	}
	if dst == "" {
		return nil
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// unmountIDMapScratch unmounts whatever id-mapped layers a container dir
// still has (a create interrupted between mount and overlay): read-only
// as they are, a removal could not have deleted layer files, but it must
// not even try.
func unmountIDMapScratch(dir string) error {
	return unmountEach(filepath.Join(dir, idmapDir), nil)
}

// ProbeUserNamespaces tells why pods cannot have their own user namespace
// here, or nil if they can: it starts the built-in pause (pauseArgs) in a
// new user namespace as a pod would, id-maps a mount of each of dirs
// (the image layers, container state and pod files) with it, and checks
// that the state dirs can be searched from inside (the pod's root is
// nobody to the host's directories).
func ProbeUserNamespaces(pauseArgs []string, idmapDirs, searchDirs []string) error {
	if len(pauseArgs) == 0 {
		return errors.New("no built-in pause")
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return fmt.Errorf("no user namespaces in this kernel: %w", err)
	}
	for _, d := range searchDirs {
		if err := searchableByOthers(d); err != nil {
			return err
		}
	}
	cmd := exec.Command(pauseArgs[0], pauseArgs[1:]...)
	m := []monitor.IDMap{{ContainerID: 0, HostID: 1 << 30, Size: 65536}}
	launch := monitor.PauseLaunch{
		Cmd: cmd, NewIPC: true, NewUTS: true, NewPID: true, Timeout: 10 * time.Second,
		Prepare: monitor.PrepareUserNS(&monitor.UserNS{UIDs: m, GIDs: m}, true),
	}
	if err := launch.Start(); err != nil {
		return fmt.Errorf("pause in a user namespace: %w", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	for _, d := range idmapDirs {
		if err := idmapMount(d, "", int(ns.Fd())); err != nil {
			return fmt.Errorf("id-mapped mount of %s: %w", d, err)
		}
	}
	return nil
}

// searchableByOthers checks that every directory from / to dir lets
// others search it: a container's root in a user namespace reaches its
// rootfs and bind mount sources by path, as nobody to the host.
func searchableByOthers(dir string) error {
	dir = filepath.Clean(dir)
	for {
		st, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by others (mode %v): a pod's root in its user namespace could not reach its files", dir, st.Mode().Perm())
		}
		if dir == "/" {
			return nil
		}
		dir = filepath.Dir(dir)
	}
}
