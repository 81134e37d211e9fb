package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// NetNS creates, pins and removes pod network namespaces. A namespace is
// pinned by bind-mounting its nsfs inode onto a file under dir, so it
// outlives every process in it: the pod keeps its interfaces and IP when
// pause is restarted, and CNI DEL can still run after pause died.
type NetNS struct {
	dir string
}

// NewNetNS returns a manager pinning namespaces under dir (created if needed).
func NewNetNS(dir string) (*NetNS, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("create netns dir %s: %w", dir, err)
	}
	return &NetNS{dir: dir}, nil
}

// Dir is where the pins live.
func (n *NetNS) Dir() string { return n.dir }

// Path is where the namespace of pod id is (or would be) pinned.
func (n *NetNS) Path(id string) string { return filepath.Join(n.dir, id) }

// newPin checks id and creates the empty file Path(id) that a namespace
// is bind-mounted onto; op names the caller in errors.
func (n *NetNS) newPin(op, id string) (string, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") || strings.HasPrefix(id, ".") {
		return "", fmt.Errorf("%s netns: invalid pod id %q", op, id)
	}
	pin := n.Path(id)
	f, err := os.OpenFile(pin, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", fmt.Errorf("create netns pin for pod %s: %w", id, err)
	}
	f.Close()
	return pin, nil
}

// Create makes a new network namespace with loopback up and pins it at
// Path(id). On error nothing is left behind.
func (n *NetNS) Create(ctx context.Context, id string) (string, error) {
	pin, err := n.newPin("create", id)
	if err != nil {
		return "", err
	}

	errc := make(chan error, 1)
	// A fresh goroutine whose thread is thrown away if it cannot be moved
	// back to the host namespace: a Go thread left in a pod's namespace
	// would silently run unrelated goroutines there.
	go func() {
		runtime.LockOSThread()
		errc <- unshareAndPin(pin)
	}()
	if err := <-errc; err != nil {
		os.Remove(pin)
		return "", fmt.Errorf("create netns for pod %s: %w", id, err)
	}
	return pin, nil
}

// Adopt pins the network namespace process pid is in at Path(id) and
// brings its loopback up: for a pod whose pause made the namespace itself
// (inside the pod's user namespace, which then owns it). On error nothing
// is left behind.
func (n *NetNS) Adopt(ctx context.Context, id string, pid int) (string, error) {
	pin, err := n.newPin("adopt", id)
	if err != nil {
		return "", err
	}
	if err := unix.Mount(fmt.Sprintf("/proc/%d/ns/net", pid), pin, "", unix.MS_BIND, ""); err != nil {
		os.Remove(pin)
		return "", fmt.Errorf("pin netns of pid %d for pod %s: %w", pid, id, err)
	}
	if err := Do(pin, loopbackUp); err != nil {
		n.Remove(ctx, pin)
		return "", fmt.Errorf("netns of pod %s: %w", id, err)
	}
	return pin, nil
}

// unshareAndPin runs on a locked thread; it unlocks it only when the thread
// is back in its original namespace.
func unshareAndPin(pin string) error {
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return fmt.Errorf("open current netns: %w", err)
	}
	defer orig.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
	pinErr := unix.Mount(src, pin, "", unix.MS_BIND, "")
	if pinErr != nil {
		pinErr = fmt.Errorf("bind mount %s: %w", pin, pinErr)
	} else if err := loopbackUp(); err != nil {
		pinErr = err
		unix.Unmount(pin, unix.MNT_DETACH)
	}
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return errors.Join(pinErr, fmt.Errorf("return to host netns: %w", err))
	}
	runtime.UnlockOSThread()
	return pinErr
}

// loopbackUp brings lo up in the calling thread's namespace, so that a pod
// has localhost whatever its CNI configuration holds.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// Remove unpins and deletes the pin at path. A missing or already
// unmounted pin is not an error: stop and remove must be idempotent.
func (n *NetNS) Remove(ctx context.Context, path string) error {
	if path == "" {
		return nil
	}
	if err := unmountAll(path); err != nil {
		return fmt.Errorf("unpin netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns pin %s: %w", path, err)
	}
	return nil
}

// unmountAll removes every mount stacked on path (a crash between two
// pins could have mounted twice).
func unmountAll(path string) error {
	for range 16 {
		err := unix.Unmount(path, unix.MNT_DETACH)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not a mount point (any more), or gone
		default:
			return err
		}
	}
	return fmt.Errorf("still mounted after 16 unmounts")
}

// List returns the pod ids that have a pin file under the directory, for
// recovery to find pins no pod owns.
func (n *NetNS) List() ([]string, error) {
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		return nil, fmt.Errorf("list netns pins: %w", err)
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// IsPinned reports whether path is a live namespace pin (an nsfs mount),
// as opposed to a leftover plain file.
func IsPinned(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}
