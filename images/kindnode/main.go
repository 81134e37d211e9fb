// Command kindnode builds berth's kind node image offline, from Debian's apt
// mirror (debootstrap) and what the project builds itself, into the local
// Docker Engine; `kind build node-image` cannot be used here (it needs the
// network and containerd).
//
//	kindnode rootfs   the Debian root filesystem tar (cached by its package list); prints its path
//	kindnode build    the node image (cached by a hash of all its inputs); prints its tag
//
// The image is kindest/node's equivalent with berth in containerd's place:
// systemd, kubelet/kubeadm/kubectl, berth with its monitor and pause, the CNI
// plugins, crictl, the entrypoint and units of files/ and files-berth/, and
// the control plane's images preloaded into berth's store under /var.
// With -runtime containerd it builds the image's containerd twin, for
// side-by-side comparisons: the same root filesystem, binaries, CNI and
// preloaded images, with containerd and runc in kindest/node's layout
// (files-containerd/) and the images imported into containerd's k8s.io
// namespace at build time. hack/kind runs it; docs/kind.md says what is in
// the images and why.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "kindnode: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kindnode rootfs|build [flags]")
	}
	cmd, args := args[0], args[1:]
	var b builder
	fs := flag.NewFlagSet("kindnode "+cmd, flag.ContinueOnError)
	fs.StringVar(&b.cacheDir, "cache", "", "directory of the cached root filesystems and the build's scratch space (required)")
	fs.StringVar(&b.mirror, "mirror", "", "Debian mirror for debootstrap; empty means the first deb URI of /etc/apt/sources.list.d/debian.sources")
	fs.StringVar(&b.heavyLock, "heavy-lock", "/tmp/berth-heavy.lock", "lock file held while debootstrap runs (one heavy job at a time); empty: none")
	fs.StringVar(&b.srcDir, "src", "", "this program's source directory: files/ is copied into the image, and the sources are inputs of the image's hash (required for build)")
	fs.StringVar(&b.kubeVersion, "kubernetes-version", "", "Kubernetes version of the binaries, written to /kind/version (required for build)")
	fs.StringVar(&b.kubeDir, "kubernetes-dir", "", "directory holding kubelet, kubeadm and kubectl (required for build)")
	fs.StringVar(&b.berthDir, "berth-dir", "", "directory holding berth, berth-monitor, berth-pause and, if built, berth-ctr (required for build with -runtime berth)")
	fs.StringVar(&b.cniDir, "cni-dir", "", "directory of the CNI plugins (required for build)")
	fs.StringVar(&b.crictl, "crictl", "", "the crictl binary (required for build)")
	fs.StringVar(&b.imagesDir, "images", "", "directory of the images to preload (hack/kind-images: images.txt and one archive per image); empty: none")
	fs.StringVar(&b.runtime, "runtime", runtimeBerth, "the node's container runtime: berth, or containerd (the twin image)")
	fs.StringVar(&b.containerdDir, "containerd-dir", "", "directory holding containerd, containerd-shim-runc-v2 and ctr (required with -runtime containerd; hack/install-containerd)")
	fs.StringVar(&b.runc, "runc", "", "the runc binary (required with -runtime containerd)")
	fs.StringVar(&b.repo, "repo", "", "repository of the image's tag (default berth/node, or berth/node-containerd for the twin)")
	fs.StringVar(&b.arch, "arch", runtime.GOARCH, "the node's architecture (GOARCH): the host's, or arm64 on amd64 from binaries cross-built for it")
	fs.StringVar(&b.foreignArch, "foreignarch", "", "test/tools/foreignarch, which runs debootstrap's second stage for another -arch (required with one)")
	fs.StringVar(&b.hostBerth, "host-berth", "", "a berth binary this host runs, for its config and image import (default: -berth-dir's, which must be the host's architecture)")
	fs.BoolVar(&b.keepOld, "keep-old", false, "keep the older images of the repository (by default a build removes those no container uses)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if b.cacheDir == "" {
		return errors.New("-cache is required")
	}
	if b.foreign() && b.foreignArch == "" {
		return fmt.Errorf("-arch %s on %s needs -foreignarch", b.arch, runtime.GOARCH)
	}
	if b.hostBerth == "" {
		if b.foreign() {
			return fmt.Errorf("-arch %s on %s needs -host-berth", b.arch, runtime.GOARCH)
		}
		b.hostBerth = filepath.Join(b.berthDir, "berth")
	}
	switch b.runtime {
	case runtimeBerth:
		if b.repo == "" {
			b.repo = "berth/node" + b.archSuffix()
		}
	case runtimeContainerd:
		if b.repo == "" {
			b.repo = "berth/node-containerd" + b.archSuffix()
		}
	default:
		return fmt.Errorf("-runtime %q: want %s or %s", b.runtime, runtimeBerth, runtimeContainerd)
	}
	b.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "rootfs":
		path, err := b.rootfs(ctx)
		if err != nil {
			return err
		}
		fmt.Println(path)
	case "build":
		for name, v := range map[string]string{"-src": b.srcDir, "-kubernetes-version": b.kubeVersion,
			"-kubernetes-dir": b.kubeDir, "-cni-dir": b.cniDir, "-crictl": b.crictl} {
			if v == "" {
				return fmt.Errorf("%s is required", name)
			}
		}
		if b.runtime == runtimeBerth && b.berthDir == "" {
			return errors.New("-berth-dir is required")
		}
		if b.runtime == runtimeContainerd && (b.containerdDir == "" || b.runc == "") {
			return errors.New("-runtime containerd needs -containerd-dir and -runc")
		}
		tag, err := b.build(ctx)
		if err != nil {
			return err
		}
		fmt.Println(tag)
	default:
		return fmt.Errorf("unknown command %q (rootfs, build)", cmd)
	}
	return nil
}

// builder holds one build's inputs.
type builder struct {
	log       *slog.Logger
	cacheDir  string
	mirror    string
	heavyLock string

	srcDir      string
	kubeVersion string
	kubeDir     string
	berthDir    string
	cniDir      string
	crictl      string
	imagesDir   string
	repo        string

	runtime       string // runtimeBerth or runtimeContainerd
	containerdDir string
	runc          string

	arch        string // GOARCH of the node
	foreignArch string // test/tools/foreignarch, for an arch not the host's
	hostBerth   string // berth for this host: config default, images import

	keepOld bool
}

// foreign says whether the node is of another architecture than the host.
func (b *builder) foreign() bool { return b.arch != runtime.GOARCH }

// archSuffix is "" for the host's architecture and "-ARCH" for another:
// the cache names and tags of the host's images stay as they always were.
func (b *builder) archSuffix() string {
	if !b.foreign() {
		return ""
	}
	return "-" + b.arch
}

// The node runtimes the builder knows.
const (
	runtimeBerth      = "berth"
	runtimeContainerd = "containerd"
)

// scratch makes a temporary directory in the cache (on the same file
// system as the results, so they are renamed into place).
func (b *builder) scratch(pattern string) (string, error) {
	dir := filepath.Join(b.cacheDir, "tmp")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create scratch dir: %w", err)
	}
	return os.MkdirTemp(dir, pattern)
}
