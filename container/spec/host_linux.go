package spec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/moby/sys/capability"
	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/container/apparmor"
)

// SystemHost answers Host questions about the machine berth runs on.
type SystemHost struct {
	// AppArmorSystem loads berth's default profile; nil is a host whose
	// containers get no AppArmor profile.
	AppArmorSystem *apparmor.System
}

var _ Host = SystemHost{}

// AppArmor implements Host.
func (h SystemHost) AppArmor() AppArmor {
	if h.AppArmorSystem == nil {
		return noAppArmor{}
	}
	return h.AppArmorSystem
}

type noAppArmor struct{}

func (noAppArmor) Usable() error {
	return errors.New("the runtime was started without AppArmor support")
}
func (noAppArmor) Loaded(string) bool { return false }
func (n noAppArmor) EnsureDefault(context.Context) (string, error) {
	return "", n.Usable()
}

// OwnOOMScoreAdj implements Host.
func (SystemHost) OwnOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

// Capabilities implements Host: the bounding set of berth's process.
func (SystemHost) Capabilities() []string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return AllCapabilities()
	}
	var mask uint64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			mask, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	var out []string
	for _, c := range capability.ListKnown() {
		if mask&(1<<uint(c)) != 0 {
			out = append(out, "CAP_"+strings.ToUpper(c.String()))
		}
	}
	return out
}

// CgroupV2 implements Host.
func (SystemHost) CgroupV2() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// Hugetlb implements Host. Mounts do not change under a running berth:
// looked up once (the cgroup version too).
func (h SystemHost) Hugetlb() bool {
	hugetlbOnce.Do(func() { hugetlbOnce.ok = hugetlbAvailable(h.CgroupV2()) })
	return hugetlbOnce.ok
}

var hugetlbOnce struct {
	sync.Once
	ok bool
}

func hugetlbAvailable(v2 bool) bool {
	if v2 {
		b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		return err == nil && slices.Contains(strings.Fields(string(b)), "hugetlb")
	}
	// A v1 hierarchy with hugetlb among its controllers (the super
	// options), where libcontainer's v1 manager looks for it.
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup"))
	if err != nil {
		return false
	}
	for _, m := range mounts {
		if slices.Contains(strings.Split(m.VFSOptions, ","), "hugetlb") {
			return true
		}
	}
	return false
}

// MountSource implements Host.
func (SystemHost) MountSource(path string) error {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("make missing mount source: %w", err)
		}
		return nil
	}
	return err
}

// ReadFile implements Host.
func (SystemHost) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

// Devices implements Host.
func (SystemHost) Devices(path string) ([]specs.LinuxDevice, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		d, err := deviceAt(real)
		if err != nil {
			return nil, err
		}
		d.Path = path
		return []specs.LinuxDevice{*d}, nil
	}
	var out []specs.LinuxDevice
	err = filepath.WalkDir(real, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Type()&fs.ModeDevice == 0 {
			return err
		}
		d, err := deviceAt(p)
		if err != nil {
			return err
		}
		d.Path = filepath.Join(path, strings.TrimPrefix(p, real))
		out = append(out, *d)
		return nil
	})
	return out, err
}

// AllDevices implements Host.
func (h SystemHost) AllDevices() ([]specs.LinuxDevice, error) {
	var out []specs.LinuxDevice
	err := filepath.WalkDir("/dev", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() {
			// Mounted by the container itself, or runtime-private.
			switch e.Name() {
			case "pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev":
				return filepath.SkipDir
			}
			return nil
		}
		if e.Type()&fs.ModeDevice == 0 || p == "/dev/console" {
			return nil
		}
		d, err := deviceAt(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		out = append(out, *d)
		return nil
	})
	return out, err
}

func deviceAt(path string) (*specs.LinuxDevice, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return nil, err
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	case unix.S_IFIFO:
		typ = "p"
	default:
		return nil, fmt.Errorf("%s is not a device", path)
	}
	mode := fs.FileMode(st.Mode &^ unix.S_IFMT)
	uid, gid := st.Uid, st.Gid
	return &specs.LinuxDevice{
		Path: path, Type: typ,
		Major: int64(unix.Major(uint64(st.Rdev))), Minor: int64(unix.Minor(uint64(st.Rdev))),
		FileMode: &mode, UID: &uid, GID: &gid,
	}, nil
}

// Propagation implements Host.
func (SystemHost) Propagation(path string) (Propagation, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return 0, err
	}
	mounts, err := mountinfo.GetMounts(nil)
	if err != nil {
		return 0, err
	}
	var best *mountinfo.Info
	for _, m := range mounts {
		if (real == m.Mountpoint || strings.HasPrefix(real, strings.TrimSuffix(m.Mountpoint, "/")+"/")) &&
			(best == nil || len(m.Mountpoint) >= len(best.Mountpoint)) {
			best = m
		}
	}
	if best == nil {
		return 0, fmt.Errorf("no mount holds %s", path)
	}
	switch {
	case strings.Contains(best.Optional, "shared:"):
		return PropagationShared, nil
	case strings.Contains(best.Optional, "master:"):
		return PropagationSlave, nil
	}
	return PropagationPrivate, nil
}

// DirFS reads files of a mounted root filesystem, resolving symlinks
// inside it so that an image cannot make berth read host files.
type DirFS string

// maxImageFile bounds a file of the image read into berth's memory
// (/etc/passwd, /etc/group): containerd's CVE-2026-47262 was an image's
// /etc/group read without bound.
const maxImageFile = 8 << 20

// ReadFile implements RootFS. Only a regular file is read, and only up to
// maxImageFile: an image's /etc/group may be a FIFO that never answers or
// a character device that never ends.
func (d DirFS) ReadFile(path string) ([]byte, error) {
	p, err := securejoin.SecureJoin(string(d), path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s of the image is not a regular file (%s)", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxImageFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxImageFile {
		return nil, fmt.Errorf("%s of the image is larger than the %d bytes berth reads", path, maxImageFile)
	}
	return b, nil
}
