package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/internal/heavylock"
)

// The Debian release and the packages of a node: kindest/base's list
// (systemd and what the kubelet, kube-proxy, the CNI plugins and volume
// plugins call), plus systemd-sysv for /sbin/init and dbus for systemd's
// API (berth's systemd cgroup driver and the kubelet's talk to it).
const (
	suite   = "bookworm"
	variant = "minbase"
)

var packages = []string{
	"systemd", "systemd-sysv", "dbus",
	"conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux", "mount", "kmod",
	"libseccomp2", "pigz", "fuse-overlayfs", "nfs-common", "open-iscsi", "e2fsprogs",
	"bash", "ca-certificates", "curl", "jq", "procps",
}

// rootfsRecipe changes whenever the way the root filesystem is made below
// changes, so that a cached one made the old way is not reused.
const rootfsRecipe = "1"

// rootfsKey names the root filesystem by what it is made of. The mirror is
// not part of it: any mirror serves the same packages.
// Another architecture's root is named apart; the host's keeps its name.
func (b *builder) rootfsKey() string {
	pkgs := slices.Clone(packages)
	slices.Sort(pkgs)
	h := sha256.New()
	fmt.Fprintf(h, "recipe %s\nsuite %s\nvariant %s\npackages %s\n", rootfsRecipe, suite, variant, strings.Join(pkgs, ","))
	if b.foreign() {
		fmt.Fprintf(h, "arch %s\n", b.arch)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// rootfs returns the cached root filesystem tar, making it with
// debootstrap if it is missing (~6 minutes, download-bound).
func (b *builder) rootfs(ctx context.Context) (string, error) {
	path := filepath.Join(b.cacheDir, fmt.Sprintf("rootfs-%s%s-%s.tar", suite, b.archSuffix(), b.rootfsKey()))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("debootstrap is not installed (hack/install-docker installs it): %w", err)
	}
	mirror := b.mirror
	if mirror == "" {
		var err error
		if mirror, err = aptMirror("/etc/apt/sources.list.d/debian.sources"); err != nil {
			return "", err
		}
	}
	unlock, err := heavylock.Take(ctx, b.heavyLock, b.log)
	if err != nil {
		return "", err
	}
	defer unlock()
	// Another build may have made it while this one waited.
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}

	dir, err := b.scratch("rootfs-*")
	if err != nil {
		return "", err
	}
	defer removeTree(b.log, dir)
	root := filepath.Join(dir, "root")
	start := time.Now()
	b.log.Info("debootstrap", "suite", suite, "arch", b.arch, "mirror", mirror, "packages", len(packages))
	if err := b.debootstrap(ctx, dir, root, mirror); err != nil {
		return "", err
	}
	b.log.Info("debootstrap done", "seconds", int(time.Since(start).Seconds()))

	// What apt downloaded and indexed is of no use in a node.
	for _, glob := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*", "var/log/*.log", "var/log/apt/*"} {
		matches, _ := filepath.Glob(filepath.Join(root, glob))
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return "", fmt.Errorf("trim rootfs: %w", err)
			}
		}
	}

	tmp := path + ".tmp"
	defer os.Remove(tmp)
	if err := runLogged(ctx, filepath.Join(dir, "tar.log"), "tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability",
		"-C", root, "-cf", tmp, "."); err != nil {
		return "", fmt.Errorf("tar rootfs: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("store rootfs: %w", err)
	}
	b.log.Info("rootfs cached", "path", path)
	return path, nil
}

// debootstrap makes the root. Another architecture's is made in two
// stages: the packages unpacked here, then configured by their own
// (emulated) binaries in the chroot, under foreignarch.
func (b *builder) debootstrap(ctx context.Context, dir, root, mirror string) error {
	args := []string{"--variant=" + variant, "--include=" + strings.Join(packages, ",")}
	if b.foreign() {
		args = append(args, "--arch="+b.arch, "--foreign")
	}
	args = append(args, suite, root, mirror)
	if err := runLogged(ctx, filepath.Join(dir, "debootstrap.log"), "debootstrap", args...); err != nil {
		return fmt.Errorf("debootstrap %s: %w", suite, err)
	}
	if !b.foreign() {
		return nil
	}
	// container=lxc: a user namespace cannot mknod, so debootstrap must
	// skip its device-node check and bind /dev, as it does in LXC.
	if err := runLogged(ctx, filepath.Join(dir, "second-stage.log"), b.foreignArch, "-arch", b.arch, "--",
		"env", "container=lxc", "chroot", root, "/debootstrap/debootstrap", "--second-stage"); err != nil {
		return fmt.Errorf("debootstrap %s (%s), second stage: %w", suite, b.arch, err)
	}
	return nil
}

// aptMirror returns the first URI of a deb822 sources file's stanza that
// serves the node's suite.
func aptMirror(sources string) (string, error) {
	f, err := os.Open(sources)
	if err != nil {
		return "", fmt.Errorf("find the apt mirror (or pass -mirror): %w", err)
	}
	defer f.Close()
	var uris, suites []string
	flush := func() string {
		defer func() { uris, suites = nil, nil }()
		if len(uris) > 0 && slices.Contains(suites, suite) {
			return uris[0]
		}
		return ""
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			if m := flush(); m != "" {
				return m, nil
			}
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch strings.ToLower(key) {
		case "uris":
			uris = strings.Fields(value)
		case "suites":
			suites = strings.Fields(value)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", sources, err)
	}
	if m := flush(); m != "" {
		return m, nil
	}
	return "", fmt.Errorf("%s has no deb source for %s (pass -mirror)", sources, suite)
}

// runLogged runs a command with its output in logFile, and puts the end of
// that output in the error when it fails.
func runLogged(ctx context.Context, logFile, name string, args ...string) error {
	out, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w; the end of its output:\n%s", err, tail(logFile, 20))
	}
	return nil
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// removeTree removes a scratch directory, unmounting first whatever is
// mounted below it (debootstrap mounts /proc and /sys into its target and
// leaves them there if it is interrupted); it removes nothing if a mount
// stays.
func removeTree(log interface{ Warn(string, ...any) }, dir string) {
	mounts, err := mountsUnder(dir)
	if err != nil {
		log.Warn("scratch dir left in place", "dir", dir, "error", err)
		return
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			log.Warn("scratch dir left in place: cannot unmount", "mount", mounts[i], "error", err)
			return
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		log.Warn("cannot remove scratch dir", "dir", dir, "error", err)
	}
}

// mountsUnder lists the mount points at or below dir, in mount order.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	return mounts, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
