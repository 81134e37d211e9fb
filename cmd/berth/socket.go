package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

const lockFile = "berth.lock"

// lockState takes an exclusive lock on the state dir, so that a second
// daemon on the same state cannot start. The lock is released when the
// process exits, however it exits. The file is opened close-on-exec (Go's
// default), so processes berth spawns do not inherit the lock.
func lockState(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFile)
	unlock, err = lockPath(path)
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("another berth is already using state dir %s (%s is locked)", dir, path)
	}
	return unlock, err
}

// lockRoot takes an exclusive lock on the persistent root, so that no
// two berths (a daemon, or berth images import --root) write one image
// store at the same time.
func lockRoot(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFile)
	unlock, err = lockPath(path)
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("another berth is already using root dir %s (%s is locked)", dir, path)
	}
	return unlock, err
}

// lockSocket takes an exclusive lock beside the socket path, so that two
// daemons with different state dirs cannot both decide at the same moment
// that the socket is stale and take it over.
func lockSocket(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	unlock, err = lockPath(path + ".lock")
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("another berth is already serving %s (%s.lock is locked)", path, path)
	}
	return unlock, err
}

var errLocked = errors.New("locked by another process")

func lockPath(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

type socket struct {
	path     string
	listener net.Listener
	created  os.FileInfo
}

// listenSocket listens on the CRI socket at path. A socket that still
// answers belongs to a live daemon and is left alone; one that does not is
// a leftover from a crash and is replaced.
func listenSocket(path, group string) (*socket, error) {
	gid, err := lookupGroup(group)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return nil, fmt.Errorf("another berth is already serving %s", path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	l, err := listenPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("chown socket to group %s: %w", group, err)
		}
	}
	created, err := os.Lstat(path)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	return &socket{path: path, listener: l, created: created}, nil
}

// listenPrivate listens on a unix socket at path that only its owner
// can connect to until it is chmodded. connect(2) checks the file's mode
// once, when a client connects, and that connection keeps its access
// after any later chmod: a socket that appeared with the umask's mode
// (0777 under umask 0) would let a local user in for good, racing the
// chmod. The umask is the process's; at start-up nothing else of berth
// creates files, and what might would only be made stricter.
func listenPrivate(path string) (net.Listener, error) {
	old := unix.Umask(0o177)
	defer unix.Umask(old)
	return net.Listen("unix", path)
}

// remove deletes the socket file, unless it is no longer the one this
// process created: another daemon may have taken the path over since.
func (s *socket) remove(log *slog.Logger) {
	s.listener.Close()
	fi, err := os.Lstat(s.path)
	if err != nil || !os.SameFile(fi, s.created) {
		return
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("cannot remove socket", "path", s.path, "error", err)
	}
}

// lookupGroup resolves a group name or numeric gid; "" gives -1 (keep root).
func lookupGroup(group string) (int, error) {
	if group == "" {
		return -1, nil
	}
	if gid, err := strconv.Atoi(group); err == nil {
		return gid, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return -1, fmt.Errorf("socket_group: %w", err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1, fmt.Errorf("socket_group %q: gid %q is not a number", group, g.Gid)
	}
	return gid, nil
}
