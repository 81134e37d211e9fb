package vmbed

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-runtime/berth/internal/heavylock"
)

// rootfsName is the cached root's file name: the suite, the architecture
// (none for amd64, whose roots keep the names they always had) and key.
func rootfsName(suite, arch, key string) string {
	return "rootfs-" + suite + archs[arch].suffix + "-" + key[:16] + ".tar"
}

// debootstrap returns a tarball of a minbase root of cfg.Suite with
// Packages and cfg.Extra, built once per suite, architecture and package
// list. A foreign architecture's root is debootstrapped in two stages: the
// first unpacks the packages on the host, the second configures them in a
// chroot whose binaries run under QEMU's user-mode emulator (foreignarch).
func debootstrap(ctx context.Context, cfg ImageConfig) (string, error) {
	arch, _, err := lookupArch(cfg.Arch)
	if err != nil {
		return "", err
	}
	// Without extras the key is the one images were always cached by.
	pkgs := append(append([]string{}, Packages...), cfg.Extra...)
	key := hashOf(append([]string{cfg.Suite}, pkgs...)...)
	out := filepath.Join(cfg.Cache, rootfsName(cfg.Suite, arch, key))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cfg.Cache, 0o755); err != nil {
		return "", err
	}
	unlock, err := heavylock.Take(ctx, cfg.HeavyLock, cfg.Log)
	if err != nil {
		return "", err
	}
	defer unlock()
	// Another build may have made it while this one waited.
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	dir, err := os.MkdirTemp(cfg.Cache, ".debootstrap-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	cfg.Log.Info("debootstrap (minutes)", "suite", cfg.Suite, "arch", arch, "into", out)
	root := filepath.Join(dir, "root")
	args := []string{"--variant=minbase", "--include=" + strings.Join(pkgs, ","), cfg.Suite, root, cfg.Mirror}
	if foreign(arch) {
		args = append([]string{"--arch=" + arch, "--foreign"}, args...)
	}
	if err := run(ctx, cfg.Log, "debootstrap", args...); err != nil {
		return "", err
	}
	if foreign(arch) {
		cfg.Log.Info("debootstrap: second stage under emulation", "arch", arch, "first stage", time.Since(start).Round(time.Second))
		// A user namespace may not make device nodes: container=lxc skips
		// the second stage's check that it can (debootstrap's only other
		// use of it is the first stage's nodes, which the host made; no
		// maintainer script of the image reads it).
		c := chrootCommand(arch, cfg.ForeignArch, root, []string{"container=lxc"}, "/debootstrap/debootstrap", "--second-stage")
		if err := run(ctx, cfg.Log, c[0], c[1:]...); err != nil {
			return "", err
		}
	}
	cfg.Log.Info("debootstrap done", "arch", arch, "took", time.Since(start).Round(time.Second))
	// The package cache is half the root's size and no test needs it.
	os.RemoveAll(filepath.Join(root, "var/cache/apt/archives"))
	tmp := out + ".tmp"
	if err := run(ctx, cfg.Log, "tar", "--numeric-owner", "-cpf", tmp, "-C", root, "."); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// runIn runs a command chrooted into root; for a foreign architecture
// under foreignarch, which registers QEMU's user-mode emulator in a
// binfmt_misc of its own user namespace (never the host's).
func runIn(ctx context.Context, cfg ImageConfig, root string, cmd ...string) error {
	arch, _, err := lookupArch(cfg.Arch)
	if err != nil {
		return err
	}
	args := chrootCommand(arch, cfg.ForeignArch, root, nil, cmd...)
	return run(ctx, cfg.Log, args[0], args[1:]...)
}

// chrootCommand is the command line that runs cmd chrooted into root,
// with env (NAME=VALUE) added to its environment.
func chrootCommand(arch, foreignArch, root string, env []string, cmd ...string) []string {
	c := append([]string{"chroot", root}, cmd...)
	if len(env) > 0 {
		c = append(append([]string{"env"}, env...), c...)
	}
	if !foreign(arch) {
		return c
	}
	if foreignArch == "" {
		foreignArch = "foreignarch"
	}
	return append([]string{foreignArch, "-arch", arch, "--"}, c...)
}

// debianApt is a private apt setup for one suite and architecture: its
// lists are kept apart from the host's (and from other architectures'),
// so that a bookworm amd64 host can fetch trixie's or arm64's packages.
type debianApt struct {
	cfg     ImageConfig
	suite   string
	arch    string
	dir     string
	updated bool
}

// aptDir is the private apt directory of suite and arch: apt-SUITE for
// amd64, as it always was.
func aptDir(cache, suite, arch string) string {
	return filepath.Join(cache, "apt-"+suite+archs[arch].suffix)
}

// aptOptions are apt's options for the private setup in dir; a foreign
// architecture is apt's only one there.
func aptOptions(dir, arch string) []string {
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + filepath.Join(dir, "sources.list"),
		"-o", "Dir::Etc::SourceParts=/nonexistent",
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "APT::Sandbox::User=root",
	}
	if foreign(arch) {
		opts = append(opts, "-o", "APT::Architecture="+arch, "-o", "APT::Architectures="+arch)
	}
	return opts
}

func newDebianApt(cfg ImageConfig, suite, arch string) *debianApt {
	return &debianApt{cfg: cfg, suite: suite, arch: arch, dir: aptDir(cfg.Cache, suite, arch)}
}

// update writes the sources and fetches the lists, once.
func (a *debianApt) update(ctx context.Context) error {
	if a.updated {
		return nil
	}
	for _, d := range []string{filepath.Join(a.dir, "lists/partial"), filepath.Join(a.dir, "cache/archives/partial")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	sources := fmt.Sprintf("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n", a.cfg.Mirror, a.suite)
	if err := os.WriteFile(filepath.Join(a.dir, "sources.list"), []byte(sources), 0o644); err != nil {
		return err
	}
	if err := run(ctx, a.cfg.Log, "apt-get", append(aptOptions(a.dir, a.arch), "-qq", "update")...); err != nil {
		return err
	}
	a.updated = true
	return nil
}

// download fetches pkg's .deb into dir.
func (a *debianApt) download(ctx context.Context, pkg, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := a.update(ctx); err != nil {
		return err
	}
	get := exec.CommandContext(ctx, "apt-get", append(aptOptions(a.dir, a.arch), "-qq", "download", pkg)...)
	get.Dir, get.Stdout, get.Stderr = dir, os.Stderr, os.Stderr
	if err := get.Run(); err != nil {
		return fmt.Errorf("apt-get download %s: %w", pkg, err)
	}
	return nil
}

// fetchKernel returns Debian's cloud kernel package of suite for
// cfg.Arch, downloaded once: the apt lists of suite are kept apart from
// the host's, so that a bookworm host can fetch trixie's kernel.
func fetchKernel(ctx context.Context, cfg ImageConfig, suite string) (string, error) {
	arch, a, err := lookupArch(cfg.Arch)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cfg.Cache, "kernel-"+suite+a.suffix)
	if debs, _ := filepath.Glob(filepath.Join(dir, "linux-image-*.deb")); len(debs) == 1 {
		return debs[0], nil
	}
	apt := newDebianApt(cfg, suite, arch)
	if err := apt.update(ctx); err != nil {
		return "", err
	}
	meta := "linux-image-cloud-" + arch
	var depends bytes.Buffer
	c := exec.CommandContext(ctx, "apt-cache", append(aptOptions(apt.dir, arch), "depends", meta)...)
	c.Stdout, c.Stderr = &depends, os.Stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w", meta, err)
	}
	m := kernelDep(arch).FindStringSubmatch(depends.String())
	if m == nil {
		return "", fmt.Errorf("no cloud kernel in %s's %s: %q", suite, meta, depends.String())
	}
	if err := apt.download(ctx, m[1], dir); err != nil {
		return "", err
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "linux-image-*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("downloaded %s, found %d packages in %s", m[1], len(debs), dir)
	}
	return debs[0], nil
}

// fetchBusybox returns Debian's busybox-static package of cfg.Suite for a
// foreign cfg.Arch, downloaded once, whose static busybox the initramfs
// carries (the host's own busybox serves its own architecture).
func fetchBusybox(ctx context.Context, cfg ImageConfig) (string, error) {
	arch, a, err := lookupArch(cfg.Arch)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cfg.Cache, "busybox-"+cfg.Suite+a.suffix)
	if debs, _ := filepath.Glob(filepath.Join(dir, "busybox-static_*.deb")); len(debs) == 1 {
		return debs[0], nil
	}
	if err := newDebianApt(cfg, cfg.Suite, arch).download(ctx, "busybox-static", dir); err != nil {
		return "", err
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "busybox-static_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("downloaded busybox-static, found %d packages in %s", len(debs), dir)
	}
	return debs[0], nil
}

// run runs a command with its output on stderr, and says which failed.
func run(ctx context.Context, log *slog.Logger, name string, args ...string) error {
	log.Debug("run", "cmd", name, "args", args)
	c := exec.CommandContext(ctx, name, args...)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}
