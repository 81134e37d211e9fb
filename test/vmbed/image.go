// Package vmbed is berth's virtual-machine test bed: a Debian root file
// system with Debian's kernel, booted under QEMU (KVM where the host has
// it, TCG otherwise) on the unified cgroup hierarchy, so that cgroup v2,
// systemd, AppArmor and CRIU can be tested from a cgroup v1 host without
// touching the host's own hierarchies.
//
// Everything is built offline from Debian's mirror and cached by its
// inputs: the debootstrapped root, the kernel package, and the finished
// image (root disk, kernel, initramfs).
package vmbed

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// imageFormat changes whenever the way an image is put together changes
// without any input changing, so that cached images are rebuilt.
const imageFormat = "3"

//go:embed files
var files embed.FS

// Kernels maps a --kernel name to the Debian suite whose cloud kernel it is.
var Kernels = map[string]string{
	"6.1":  "bookworm",
	"6.12": "trixie",
}

// Packages are the root file system's packages beyond debootstrap's minbase.
var Packages = []string{
	"systemd", "systemd-sysv", "dbus", "udev", "iproute2", "iptables", "kmod",
	"util-linux", "procps", "apparmor", "criu", "ca-certificates", "e2fsprogs",
}

// ImageConfig says which image to build.
type ImageConfig struct {
	Cache  string // where built pieces are kept, keyed by their inputs
	Mirror string // Debian mirror, e.g. http://deb.debian.org/debian
	Suite  string // root file system's Debian suite
	Kernel string // a key of Kernels
	// Arch is the machine's architecture, a GOARCH: amd64 (also when
	// empty) or arm64, emulated by QEMU's virt machine.
	Arch string
	// ForeignArch is the foreignarch tool (test/tools/foreignarch) that
	// runs a foreign architecture's chroot steps; "foreignarch" on PATH
	// when empty.
	ForeignArch string
	// HeavyLock is a lock file held while debootstrap runs, so that it
	// does not share the cores with another heavy build; none if empty.
	HeavyLock string
	// Extra are packages beyond Packages: a variant of the image with
	// its own root file system and name (hack/vm-kind's docker.io).
	Extra []string
	Log   *slog.Logger
}

// Image is a built, cached VM image. Its files are never written by a run:
// the root disk is booted with snapshot=on.
type Image struct {
	Dir    string
	Root   string // ext4 root disk
	Kernel string // vmlinuz
	Initrd string // busybox initramfs that loads virtio_blk and mounts the root
	KVer   string // the kernel's release, as uname -r prints it
	Arch   string // the machine's architecture, a GOARCH
}

// BuildImage returns the image for cfg, building and caching whatever is
// missing.
func BuildImage(ctx context.Context, cfg ImageConfig) (*Image, error) {
	ksuite, ok := Kernels[cfg.Kernel]
	if !ok {
		return nil, fmt.Errorf("unknown kernel %q (want one of 6.1, 6.12)", cfg.Kernel)
	}
	arch, _, err := lookupArch(cfg.Arch)
	if err != nil {
		return nil, err
	}
	cfg.Arch = arch
	kdeb, err := fetchKernel(ctx, cfg, ksuite)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", cfg.Kernel, err)
	}
	rootTar, err := debootstrap(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("root file system %s: %w", cfg.Suite, err)
	}
	keyParts := []string{imageFormat, filepath.Base(rootTar), filepath.Base(kdeb), embeddedHash()}
	// The host's busybox serves amd64 (and is no input of its key, as it
	// never was); a foreign architecture's comes from Debian.
	busybox := ""
	if foreign(arch) {
		bdeb, err := fetchBusybox(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("busybox for %s: %w", arch, err)
		}
		busybox = bdeb
		keyParts = append(keyParts, filepath.Base(bdeb))
	}
	key := hashOf(keyParts...)
	name := imageName(cfg.Suite, cfg.Kernel, arch, cfg.Extra)
	dir := filepath.Join(cfg.Cache, name+"-"+key[:16])
	img, err := loadImage(dir, arch)
	if err == nil {
		return img, nil
	}
	cfg.Log.Info("building VM image", "dir", dir)
	if err := assemble(ctx, cfg, dir, rootTar, kdeb, busybox); err != nil {
		os.RemoveAll(dir + ".tmp")
		return nil, err
	}
	// Images of older inputs are never booted again.
	entries, _ := os.ReadDir(cfg.Cache)
	for _, e := range entries {
		if d := filepath.Join(cfg.Cache, e.Name()); d != dir && isImageOf(e.Name(), name) {
			os.RemoveAll(d)
		}
	}
	return loadImage(dir, arch)
}

// imageName names an image without its key: the suite, the kernel, the
// architecture (none for amd64, whose images keep the names they always
// had) and the extra packages, so that no variant counts another as stale.
func imageName(suite, kernel, arch string, extra []string) string {
	name := "image-" + suite + "-" + kernel + archs[arch].suffix
	for _, p := range extra {
		name += "+" + p
	}
	return name
}

// isImageOf says whether dir is name followed by a key: only then is it
// an older image of the same variant (image-bookworm-6.1-arm64-KEY is not
// one of image-bookworm-6.1).
func isImageOf(dir, name string) bool {
	key, ok := strings.CutPrefix(dir, name+"-")
	if !ok || len(key) != 16 {
		return false
	}
	for _, c := range key {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

func loadImage(dir, arch string) (*Image, error) {
	kver, err := os.ReadFile(filepath.Join(dir, "kernel-release"))
	if err != nil {
		return nil, err
	}
	img := &Image{
		Dir:    dir,
		Root:   filepath.Join(dir, "root.ext4"),
		Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd.cpio"),
		KVer:   strings.TrimSpace(string(kver)),
		Arch:   arch,
	}
	for _, f := range []string{img.Root, img.Kernel, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// assemble unpacks the root and the kernel into a work directory, adds the
// test bed's files, and writes the root disk and the initramfs; the
// finished directory appears under its final name only when complete.
func assemble(ctx context.Context, cfg ImageConfig, dir, rootTar, kdeb, busyboxDeb string) error {
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"unpack root", func() error { return run(ctx, cfg.Log, "tar", "-xpf", rootTar, "-C", root) }},
		{"unpack kernel", func() error { return unpackDeb(ctx, cfg, kdeb, root) }},
		{"configure root", func() error { return configureRoot(ctx, cfg, root) }},
		{"initramfs", func() error { return buildInitramfs(ctx, cfg, root, tmp, busyboxDeb) }},
		{"root disk", func() error { return rootDisk(ctx, cfg, root, tmp) }},
	}
	for _, s := range steps {
		cfg.Log.Info("image step", "step", s.name)
		if err := s.do(); err != nil {
			return fmt.Errorf("image %s: %s: %w", dir, s.name, err)
		}
	}
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// unpackDeb extracts a package into the root without replacing the
// merged-/usr symlinks (/lib -> usr/lib) with directories, as dpkg-deb -x
// would.
func unpackDeb(ctx context.Context, cfg ImageConfig, deb, root string) error {
	return run(ctx, cfg.Log, "sh", "-c", `dpkg-deb --fsys-tarfile "$1" | tar -x --keep-directory-symlink -C "$2"`, "sh", deb, root)
}

// configureRoot installs the test bed's own files (the job runner, its
// unit, the init without systemd, fstab), registers the kernel's modules
// and turns off what only slows a throwaway machine's boot.
func configureRoot(ctx context.Context, cfg ImageConfig, root string) error {
	err := fs.WalkDir(files, "files/root", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, strings.TrimPrefix(p, "files/root"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.Contains(p, "/bin/") || strings.Contains(p, "/sbin/") {
			mode = 0o755
		}
		return os.WriteFile(dst, data, mode)
	})
	if err != nil {
		return err
	}
	kver, err := kernelRelease(root)
	if err != nil {
		return err
	}
	cmds := [][]string{
		{"/usr/sbin/depmod", "-a", kver},
		{"/usr/bin/systemctl", "enable", "berth-vm-job.service"},
		{"/usr/bin/systemctl", "mask", "systemd-timesyncd.service", "apt-daily.timer",
			"apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer", "getty@tty1.service",
			"serial-getty@" + archs[cfg.Arch].console + ".service", "systemd-networkd-wait-online.service"},
	}
	for _, c := range cmds {
		if err := runIn(ctx, cfg, root, c...); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("berth-vm\n"), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "etc/machine-id"), nil, 0o444)
}

// kernelRelease is the one kernel release under the root's /lib/modules.
func kernelRelease(root string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "lib/modules"))
	if err != nil {
		return "", err
	}
	if len(entries) != 1 {
		return "", fmt.Errorf("want one kernel in /lib/modules, found %d", len(entries))
	}
	return entries[0].Name(), nil
}

// rootDisk writes the root into an ext4 image without a loop mount. The
// image is sparse; its free space is what a run's containers and images get.
func rootDisk(ctx context.Context, cfg ImageConfig, root, dir string) error {
	kver, err := kernelRelease(root)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kernel-release"), []byte(kver+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(root, "boot/vmlinuz-"+kver), filepath.Join(dir, "vmlinuz")); err != nil {
		return err
	}
	return run(ctx, cfg.Log, "mkfs.ext4", "-q", "-F", "-L", "berth-vm-root", "-d", root,
		filepath.Join(dir, "root.ext4"), "8G")
}

func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// embeddedHash covers the test bed's own files, so that editing one of
// them rebuilds the images.
func embeddedHash() string {
	var names []string
	fs.WalkDir(files, "files", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	sort.Strings(names)
	parts := []string{}
	for _, n := range names {
		data, _ := files.ReadFile(n)
		parts = append(parts, n, string(data))
	}
	return hashOf(parts...)
}
