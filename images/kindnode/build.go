package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// item is one thing the build puts into the root filesystem.
type item struct {
	dest string // path in the image, relative to its root
	src  string // a host file to copy, or
	data []byte // the content, or
	link string // a symlink's target
	mode os.FileMode
}

// Units enabled the way `systemctl enable` would (links in
// multi-user.target.wants and the aliases), and units masked.
var (
	enabledUnits = map[string][]string{
		runtimeBerth:      {"berth.service", "kubelet.service", "kind-restore-cgroups.service"},
		runtimeContainerd: {"containerd.service", "kubelet.service", "kind-restore-cgroups.service"},
	}
	unitAliases = map[string]map[string]string{
		runtimeBerth: {"containerd.service": "berth.service"},
	}
	// Nothing binfmt-related, and no login prompts, in a node.
	maskedUnits = []string{"systemd-binfmt.service", "getty.target", "console-getty.service"}
)

// trimmedUnits are the unit links of the Debian install removed from the
// image, as kindest/base does: a node starts only the units it needs
// (systemd's own, dbus, berth, the kubelet) and nothing that cleans up
// /tmp or /var behind the kubelet (systemd-tmpfiles-setup).
var trimmedUnits = []string{
	"lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
	"lib/systemd/system/multi-user.target.wants/*",
	"lib/systemd/system/local-fs.target.wants/*",
	"lib/systemd/system/sockets.target.wants/*udev*",
	"lib/systemd/system/sockets.target.wants/*initctl*",
	"lib/systemd/system/basic.target.wants/*",
	"etc/systemd/system/*.wants/*",
}

// emptyDirs are directories a node needs that nothing installs.
var emptyDirs = []string{
	"etc/kubernetes/manifests", // kubeadm's static pods
	"etc/cni/net.d",            // berth writes its default network here
	"etc/containerd/certs.d",   // kind's local-registry guide writes hosts.toml here
	"opt/cni/bin",
}

// build makes the node image unless one with the same inputs exists, and
// returns its tag.
func (b *builder) build(ctx context.Context) (string, error) {
	start := time.Now()
	rootfs, err := b.rootfs(ctx)
	if err != nil {
		return "", err
	}
	items, err := b.items(ctx)
	if err != nil {
		return "", err
	}
	preloads, err := b.preloads()
	if err != nil {
		return "", err
	}
	sum, err := b.inputsHash(items, preloads)
	if err != nil {
		return "", err
	}
	tag := fmt.Sprintf("%s:%s-%s", b.repo, b.kubeVersion, sum[:12])
	if docker(ctx, nil, nil, "image", "inspect", "--format", "{{.Id}}", tag) == nil {
		b.log.Info("node image cached", "tag", tag)
		return tag, nil
	}
	if len(preloads) == 0 {
		b.log.Warn("no images to preload: the node pulls the control plane's images (there is no registry offline)", "images", b.imagesDir)
	}

	dir, err := b.scratch("node-*")
	if err != nil {
		return "", err
	}
	defer removeTree(b.log, dir)
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	if err := runLogged(ctx, filepath.Join(dir, "extract.log"), "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*",
		"-xpf", rootfs, "-C", root); err != nil {
		return "", fmt.Errorf("extract rootfs: %w", err)
	}
	if err := trimUnits(root); err != nil {
		return "", err
	}
	for _, it := range items {
		if err := install(root, it); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(filepath.Join(root, "sbin/init")); err != nil {
		return "", fmt.Errorf("the rootfs has no /sbin/init (systemd-sysv): %w", err)
	}
	preload := b.preload
	if b.runtime == runtimeContainerd {
		preload = b.preloadContainerd
	}
	if err := preload(ctx, dir, root, preloads); err != nil {
		return "", err
	}
	if err := b.dockerImage(ctx, dir, root, tag, sum); err != nil {
		return "", err
	}
	b.log.Info("node image built", "tag", tag, "seconds", int(time.Since(start).Seconds()))
	if !b.keepOld {
		b.removeOld(ctx, tag)
	}
	return tag, nil
}

// items lists everything the build adds to the Debian root filesystem.
func (b *builder) items(ctx context.Context) ([]item, error) {
	// files/ is common to both runtimes, files-RUNTIME/ the runtime's own;
	// a path in both is the runtime's.
	var items []item
	for _, sub := range []string{"files", "files-" + b.runtime} {
		var err error
		if items, err = addFiles(items, filepath.Join(b.srcDir, sub)); err != nil {
			return nil, err
		}
	}
	items = dedupe(items)

	bin := func(dest, src string) error {
		info, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("node image input: %w", err)
		}
		if !info.Mode().IsRegular() || info.Mode()&0o111 == 0 {
			return fmt.Errorf("node image input %s is not an executable file", src)
		}
		items = append(items, item{dest: dest, src: src, mode: 0o755})
		return nil
	}
	for _, name := range []string{"kubelet", "kubeadm", "kubectl"} {
		if err := bin("usr/bin/"+name, filepath.Join(b.kubeDir, name)); err != nil {
			return nil, err
		}
	}
	switch b.runtime {
	case runtimeBerth:
		// berth finds its pod processes (the C one and the Go monitor that
		// pods made before it keep) and pause next to itself, each pod
		// process its spawn helper next to itself.
		for _, name := range []string{"berth", "berth-podproc", "berth-monitor", "berth-spawn", "berth-pause"} {
			if err := bin("usr/local/bin/"+name, filepath.Join(b.berthDir, name)); err != nil {
				return nil, err
			}
		}
		// The containerd and ctr stand-ins kind's `kind load` and `kind export
		// logs` call, once cmd/berth-ctr exists.
		if ctr := filepath.Join(b.berthDir, "berth-ctr"); fileExists(ctr) {
			if err := bin("usr/local/bin/berth-ctr", ctr); err != nil {
				return nil, err
			}
			items = append(items, item{dest: "usr/local/bin/ctr", link: "berth-ctr"},
				item{dest: "usr/local/bin/containerd", link: "berth-ctr"})
		} else {
			b.log.Warn("no berth-ctr: the image has no containerd/ctr stand-ins (kind load will not work)", "dir", b.berthDir)
		}
	case runtimeContainerd:
		// kindest/node's paths: containerd and its tools in /usr/local/bin,
		// runc in /usr/local/sbin (the shim finds it on PATH).
		for _, name := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
			if err := bin("usr/local/bin/"+name, filepath.Join(b.containerdDir, name)); err != nil {
				return nil, err
			}
		}
		if err := bin("usr/local/sbin/runc", b.runc); err != nil {
			return nil, err
		}
	}
	if err := bin("usr/local/bin/crictl", b.crictl); err != nil {
		return nil, err
	}
	plugins, err := os.ReadDir(b.cniDir)
	if err != nil {
		return nil, fmt.Errorf("list CNI plugins: %w", err)
	}
	for _, p := range plugins {
		if p.Type().IsRegular() {
			if err := bin("opt/cni/bin/"+p.Name(), filepath.Join(b.cniDir, p.Name())); err != nil {
				return nil, err
			}
		}
	}

	for _, d := range emptyDirs {
		items = append(items, item{dest: d, mode: fs.ModeDir | 0o755})
	}
	// kind reads the node's Kubernetes version from /kind/version.
	items = append(items, item{dest: "kind/version", data: []byte(b.kubeVersion + "\n"), mode: 0o644})
	if b.runtime == runtimeBerth {
		conf, err := b.berthConfig(ctx)
		if err != nil {
			return nil, err
		}
		items = append(items, item{dest: "etc/berth/config.toml", data: conf, mode: 0o644})
	}

	for _, u := range enabledUnits[b.runtime] {
		items = append(items, item{dest: "etc/systemd/system/multi-user.target.wants/" + u, link: "/etc/systemd/system/" + u})
	}
	for alias, u := range unitAliases[b.runtime] {
		items = append(items, item{dest: "etc/systemd/system/" + alias, link: "/etc/systemd/system/" + u})
	}
	for _, u := range maskedUnits {
		items = append(items, item{dest: "etc/systemd/system/" + u, link: "/dev/null"})
	}
	slices.SortStableFunc(items, func(a, b item) int { return strings.Compare(a.dest, b.dest) })
	return items, nil
}

// addFiles appends the files, directories and links under dir (which
// must exist) as items.
func addFiles(items []item, dir string) ([]item, error) {
	files := dir
	err := filepath.WalkDir(files, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == files {
			return err
		}
		rel, _ := filepath.Rel(files, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			items = append(items, item{dest: rel, mode: fs.ModeDir | 0o755})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			items = append(items, item{dest: rel, link: target})
		case info.Mode().IsRegular():
			items = append(items, item{dest: rel, src: p, mode: fileMode(info.Mode())})
		default:
			return fmt.Errorf("%s: not a file, directory or symlink", p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", files, err)
	}

	return items, nil
}

// dedupe keeps the last item of each destination.
func dedupe(items []item) []item {
	last := map[string]int{}
	for i, it := range items {
		last[it.dest] = i
	}
	var out []item
	for i, it := range items {
		if last[it.dest] == i {
			out = append(out, it)
		}
	}
	return out
}

// configKeys are the keys of /etc/berth/config.toml in a node, each with
// why. A key the berth being installed does not know yet is left out
// (berth refuses unknown keys), and the build says so.
var configKeys = []struct {
	table, key, value, why string
}{
	{"", "cgroup_driver", `"systemd"`, "kind's kubelet uses the systemd cgroup driver (systemd is PID 1)"},
	{"", "stream_address", `"127.0.0.1:0"`, "the kubelet proxies exec, attach and port-forward: loopback is enough"},
	{"", "registry_config_path", `"/etc/containerd/certs.d"`, "kind's local-registry guide writes <host>/hosts.toml there"},
	{"cni", "default_network", "true", "a bridge network of berth's own: kindnet cannot be built here"},
	{"cni", "default_pod_cidr", "true", "on the pod CIDR the kubelet sends, so that flannel's routes between nodes reach it"},
	{"cni", "default_masquerade", "false", "flannel masquerades what leaves the cluster; pods on other nodes see pod IPs"},
}

// berthConfig writes the node's berth config with the keys the installed
// berth knows (`berth config default` lists them all).
func (b *builder) berthConfig(ctx context.Context) ([]byte, error) {
	out, err := exec.CommandContext(ctx, b.hostBerth, "config", "default").Output()
	if err != nil {
		return nil, fmt.Errorf("berth config default: %w", err)
	}
	var conf strings.Builder
	conf.WriteString("# berth in a kind node (written by images/kindnode; `berth config default` lists every key).\n")
	table := ""
	for _, k := range configKeys {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(k.key) + ` = `).Match(out) {
			b.log.Warn("berth does not know this config key yet: left out of the node's config", "key", k.key)
			continue
		}
		if k.table != table {
			fmt.Fprintf(&conf, "\n[%s]\n", k.table)
			table = k.table
		}
		fmt.Fprintf(&conf, "# %s.\n%s = %s\n", k.why, k.key, k.value)
	}
	return []byte(conf.String()), nil
}

// preloads lists the image archives to import (hack/kind-images writes
// images.txt, one archive file name per line, first field).
func (b *builder) preloads() ([]string, error) {
	if b.imagesDir == "" {
		return nil, nil
	}
	list := filepath.Join(b.imagesDir, "images.txt")
	data, err := os.ReadFile(list)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read preloaded images: %w", err)
	}
	var archives []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		p := fields[0]
		if !filepath.IsAbs(p) {
			p = filepath.Join(b.imagesDir, p)
		}
		if !fileExists(p) {
			return nil, fmt.Errorf("%s names %s, which does not exist", list, p)
		}
		archives = append(archives, p)
	}
	return archives, nil
}

// preload imports the archives into the image's berth store, pinned (the
// kubelet's image GC never removes them), under /var: kind mounts a
// volume there that Docker fills from the image.
func (b *builder) preload(ctx context.Context, _, root string, archives []string) error {
	if len(archives) == 0 {
		return nil
	}
	store := filepath.Join(root, "var/lib/berth")
	start := time.Now()
	// One import for all: atomic, and layers shared between the images are
	// unpacked once. The node's own config, so that the store is opened as
	// the node's berth will open it, not as the host's config says.
	args := append([]string{"images", "import", "--config", filepath.Join(root, "etc/berth/config.toml"),
		"--root", store, "--pinned"}, archives...)
	cmd := exec.CommandContext(ctx, b.hostBerth, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("preload images: %w\n%s", err, out)
	}
	b.log.Info("preloaded", "archives", len(archives), "seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()))
	os.Stderr.Write(out)
	return checkStore(store)
}

// checkStore refuses a store Docker would damage: overlayfs whiteouts
// (0/0 character devices) in a lower layer of Docker's own overlay hide
// themselves, and Docker's copy of the image's /var into kind's volume
// keeps no trusted.* xattrs (opaque directories).
func checkStore(store string) error {
	return filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeCharDevice != 0 {
			if rdev, ok := deviceNumber(p); ok && rdev == 0 {
				return fmt.Errorf("preloaded store holds an overlay whiteout (%s), which Docker's overlay would hide in the node image", p)
			}
		}
		if d.IsDir() && hasOverlayXattr(p) {
			return fmt.Errorf("preloaded store holds an overlay opaque directory (%s), which Docker's copy of /var into the node's volume would lose", p)
		}
		return nil
	})
}

// inputsHash names the image by everything that goes into it: the rootfs,
// this program's sources, every item and every preloaded archive.
func (b *builder) inputsHash(items []item, preloads []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "rootfs %s\nkubernetes %s\nruntime %s\n", b.rootfsKey(), b.kubeVersion, b.runtime)
	if b.foreign() {
		fmt.Fprintf(h, "arch %s\n", b.arch)
	}
	sources, err := filepath.Glob(filepath.Join(b.srcDir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, s := range sources {
		if strings.HasSuffix(s, "_test.go") {
			continue
		}
		sum, err := fileSum(s)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "source %s %s\n", filepath.Base(s), sum)
	}
	for _, it := range items {
		switch {
		case it.link != "":
			fmt.Fprintf(h, "link %s %s\n", it.dest, it.link)
		case it.mode.IsDir():
			fmt.Fprintf(h, "dir %s\n", it.dest)
		case it.src != "":
			sum, err := fileSum(it.src)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "file %s %o %s\n", it.dest, it.mode, sum)
		default:
			s := sha256.Sum256(it.data)
			fmt.Fprintf(h, "file %s %o %x\n", it.dest, it.mode, s)
		}
	}
	for _, p := range preloads {
		sum, err := fileSum(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "preload %s %s\n", filepath.Base(p), sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("hash node image input: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fileMode(m fs.FileMode) fs.FileMode {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

func fileExists(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.Mode().IsRegular()
}

// trimUnits removes the unit links trimmedUnits names.
func trimUnits(root string) error {
	for _, pattern := range trimmedUnits {
		dir, err := inRoot(root, path.Dir(pattern))
		if err != nil {
			return err
		}
		matches, err := filepath.Glob(filepath.Join(dir, path.Base(pattern)))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.Remove(m); err != nil {
				return fmt.Errorf("trim units: %w", err)
			}
		}
	}
	return nil
}

// install puts one item into the root filesystem, as root:root.
func install(root string, it item) error {
	parent, err := inRoot(root, path.Dir(it.dest))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("install %s: %w", it.dest, err)
	}
	dest := filepath.Join(parent, path.Base(it.dest))
	switch {
	case it.mode.IsDir():
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return fmt.Errorf("install %s: %w", it.dest, err)
		}
		return os.Chmod(dest, 0o755)
	case it.link != "":
		if err := os.RemoveAll(dest); err != nil {
			return fmt.Errorf("install %s: %w", it.dest, err)
		}
		if err := os.Symlink(it.link, dest); err != nil {
			return fmt.Errorf("install %s: %w", it.dest, err)
		}
		return nil
	}
	data := it.data
	if it.src != "" {
		if data, err = os.ReadFile(it.src); err != nil {
			return fmt.Errorf("install %s: %w", it.dest, err)
		}
	}
	// A file of the Debian install is replaced, never written through (it
	// may be a link, or a hard link shared with another path).
	if err := os.RemoveAll(dest); err != nil {
		return fmt.Errorf("install %s: %w", it.dest, err)
	}
	if err := os.WriteFile(dest, data, it.mode); err != nil {
		return fmt.Errorf("install %s: %w", it.dest, err)
	}
	if err := os.Chmod(dest, it.mode); err != nil {
		return err
	}
	return os.Lchown(dest, 0, 0)
}

// removeOld removes the repository's other images, those no container uses
// (Docker refuses to remove those).
func (b *builder) removeOld(ctx context.Context, keep string) {
	out, err := exec.CommandContext(ctx, "docker", "images", "--format", "{{.Repository}}:{{.Tag}}", b.repo).Output()
	if err != nil {
		return
	}
	for _, img := range strings.Fields(string(out)) {
		if img == keep {
			continue
		}
		if err := docker(ctx, nil, nil, "rmi", img); err != nil {
			b.log.Info("older node image kept", "image", img, "error", err)
		} else {
			b.log.Info("older node image removed", "image", img)
		}
	}
}

// docker runs the docker CLI; its output goes to the error on failure.
func docker(ctx context.Context, stdin io.Reader, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}
