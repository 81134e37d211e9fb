package vmbed

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildInitramfs writes initrd.cpio: a static busybox (the host's, or
// for a foreign architecture the one in busyboxDeb), the boot modules
// (uncompressed, for busybox's insmod) and an init that loads them, mounts
// the root disk and switches to it.
func buildInitramfs(ctx context.Context, cfg ImageConfig, root, dir, busyboxDeb string) error {
	stage := filepath.Join(dir, "initramfs")
	for _, d := range []string{"bin", "dev", "proc", "sys", "newroot", "modules"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return err
		}
	}
	if busyboxDeb != "" {
		script := `dpkg-deb --fsys-tarfile "$1" | tar -xO ./bin/busybox > "$2" && chmod 755 "$2"`
		if err := run(ctx, cfg.Log, "sh", "-c", script, "sh", busyboxDeb, filepath.Join(stage, "bin/busybox")); err != nil {
			return fmt.Errorf("busybox from %s: %w", busyboxDeb, err)
		}
	} else {
		busybox, err := exec.LookPath("busybox")
		if err != nil {
			return fmt.Errorf("static busybox (Debian's busybox-static): %w", err)
		}
		if err := run(ctx, cfg.Log, "cp", busybox, filepath.Join(stage, "bin/busybox")); err != nil {
			return err
		}
	}
	init, err := files.ReadFile("files/initramfs/init")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(stage, "init"), init, 0o755); err != nil {
		return err
	}
	if err := copyBootModules(ctx, root, filepath.Join(stage, "modules"), archs[cfg.Arch].bootModules); err != nil {
		return err
	}
	c := exec.CommandContext(ctx, "sh", "-c", "find . | cpio -o -H newc --quiet > ../initrd.cpio")
	c.Dir, c.Stderr = stage, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("cpio: %w", err)
	}
	return os.RemoveAll(stage)
}

// copyBootModules puts each boot module that is not built in into dst as
// NN-name.ko, so that init loads them in order by name.
func copyBootModules(ctx context.Context, root, dst string, bootModules []string) error {
	kver, err := kernelRelease(root)
	if err != nil {
		return err
	}
	mods := filepath.Join(root, "lib/modules", kver)
	builtin, _ := os.ReadFile(filepath.Join(mods, "modules.builtin"))
	found := map[string]string{}
	filepath.WalkDir(filepath.Join(mods, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			name := d.Name()
			for _, ext := range []string{".ko", ".ko.xz", ".ko.zst"} {
				if strings.HasSuffix(name, ext) {
					found[strings.TrimSuffix(name, ext)] = p
				}
			}
		}
		return nil
	})
	for i, m := range bootModules {
		src, ok := found[m]
		if !ok {
			if strings.Contains(string(builtin), "/"+m+".ko\n") {
				continue
			}
			return fmt.Errorf("module %s is neither built into %s nor in %s", m, kver, mods)
		}
		out := filepath.Join(dst, fmt.Sprintf("%02d-%s.ko", i, m))
		var script string
		switch {
		case strings.HasSuffix(src, ".xz"):
			script = `xz -dc "$1" > "$2"`
		case strings.HasSuffix(src, ".zst"):
			script = `zstd -qdc "$1" > "$2"`
		default:
			script = `cp "$1" "$2"`
		}
		c := exec.CommandContext(ctx, "sh", "-c", script, "sh", src, out)
		c.Stderr = os.Stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("module %s: %w", m, err)
		}
	}
	return nil
}
