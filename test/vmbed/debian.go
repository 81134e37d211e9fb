package vmbed

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// debootstrap returns a tarball of a minbase root of cfg.Suite with
// Packages and cfg.Extra, built once per suite and package list.
func debootstrap(ctx context.Context, cfg ImageConfig) (string, error) {
	// Without extras the key is the one images were always cached by.
	pkgs := append(append([]string{}, Packages...), cfg.Extra...)
	key := hashOf(append([]string{cfg.Suite}, pkgs...)...)
	out := filepath.Join(cfg.Cache, "rootfs-"+cfg.Suite+"-"+key[:16]+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cfg.Cache, 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(cfg.Cache, ".debootstrap-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	cfg.Log.Info("debootstrap (minutes)", "suite", cfg.Suite, "into", out)
	root := filepath.Join(dir, "root")
	if err := run(ctx, cfg.Log, "debootstrap", "--variant=minbase",
		"--include="+strings.Join(pkgs, ","), cfg.Suite, root, cfg.Mirror); err != nil {
		return "", err
	}
	// The package cache is half the root's size and no test needs it.
	os.RemoveAll(filepath.Join(root, "var/cache/apt/archives"))
	tmp := out + ".tmp"
	if err := run(ctx, cfg.Log, "tar", "--numeric-owner", "-cpf", tmp, "-C", root, "."); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return out, os.Rename(tmp, out)
}

var kernelDep = regexp.MustCompile(`Depends: (linux-image-[0-9][0-9a-z.+~-]*-cloud-amd64)`)

// fetchKernel returns Debian's cloud kernel package of suite, downloaded
// once: the apt lists of suite are kept apart from the host's, so that a
// bookworm host can fetch trixie's kernel.
func fetchKernel(ctx context.Context, cfg ImageConfig, suite string) (string, error) {
	dir := filepath.Join(cfg.Cache, "kernel-"+suite)
	if debs, _ := filepath.Glob(filepath.Join(dir, "linux-image-*.deb")); len(debs) == 1 {
		return debs[0], nil
	}
	apt := filepath.Join(cfg.Cache, "apt-"+suite)
	for _, d := range []string{dir, filepath.Join(apt, "lists/partial"), filepath.Join(apt, "cache/archives/partial")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	sources := fmt.Sprintf("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n", cfg.Mirror, suite)
	if err := os.WriteFile(filepath.Join(apt, "sources.list"), []byte(sources), 0o644); err != nil {
		return "", err
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + filepath.Join(apt, "sources.list"),
		"-o", "Dir::Etc::SourceParts=/nonexistent",
		"-o", "Dir::State::Lists=" + filepath.Join(apt, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(apt, "cache"),
		"-o", "APT::Sandbox::User=root",
	}
	if err := run(ctx, cfg.Log, "apt-get", append(opts, "-qq", "update")...); err != nil {
		return "", err
	}
	var depends bytes.Buffer
	c := exec.CommandContext(ctx, "apt-cache", append(opts, "depends", "linux-image-cloud-amd64")...)
	c.Stdout, c.Stderr = &depends, os.Stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("apt-cache depends linux-image-cloud-amd64: %w", err)
	}
	m := kernelDep.FindStringSubmatch(depends.String())
	if m == nil {
		return "", fmt.Errorf("no cloud kernel in %s's linux-image-cloud-amd64: %q", suite, depends.String())
	}
	get := exec.CommandContext(ctx, "apt-get", append(opts, "-qq", "download", m[1])...)
	get.Dir, get.Stdout, get.Stderr = dir, os.Stderr, os.Stderr
	if err := get.Run(); err != nil {
		return "", fmt.Errorf("apt-get download %s: %w", m[1], err)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "linux-image-*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("downloaded %s, found %d packages in %s", m[1], len(debs), dir)
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
