package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The images a berth kind node preloads (hack/kind-images): what kubeadm
// v1.37 runs on a node (its static pods and add-ons) and the pod network's
// daemon, built from the binaries and root filesystems hack/kind-images
// prepares, under their upstream names, since kubeadm's manifests name them
// so and nothing can be pulled in the node. Each is written as an OCI image
// layout tar for `berth images import`.
//
// What they must have, from kubeadm's manifests (cmd/kubeadm/app/phases):
//   - kube-apiserver, kube-controller-manager, kube-scheduler: the binary on
//     PATH (the static pods' command is "kube-apiserver --..."), run as root.
//   - etcd: etcd and etcdctl on PATH (command "etcd --..."; the probes are
//     plain HTTP on 127.0.0.1:2381).
//   - coredns: /coredns as the entrypoint (kubeadm passes only args). As
//     root: upstream runs it as 65532 with a file capability to bind :53, which
//     layer tars here do not carry; kubeadm's pod drops every capability but
//     NET_BIND_SERVICE, so root gains nothing else.
//   - kube-proxy: /usr/local/bin/kube-proxy, and iptables-restore/-save,
//     ip6tables*, nft and conntrack on PATH (the iptables layer).
//   - flannel: /opt/bin/flanneld (upstream's path) and the iptables layer.
//   - pause: /pause, as 65535:65535.

// kindTags are the tags of the node's images, as kubeadm names them
// (`kubeadm config images list`), plus flannel's.
type kindTags struct {
	kubernetes string // v1.37.2: kube-apiserver, -controller-manager, -scheduler, -proxy
	etcd       string // 3.7.0-0: etcd's version and upstream's image revision
	coredns    string // v1.14.6
	pause      string // 3.10.2
	flannel    string // v0.28.10
	// platform the binaries were built for: linux/amd64, or linux/arm64
	// for the arm64 node image.
	platform v1.Platform
}

// staticBase is what a distroless static base has that the binaries use: the
// users upstream's images know, a resolver order for Go's and glibc's lookups,
// and /tmp.
var staticBase = entriesLayer{"static base: users, nsswitch.conf, /tmp", []entry{
	dir("etc"),
	file("etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
	file("etc/group", "root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n"),
	file("etc/nsswitch.conf", "hosts: files dns\n"),
	dir("home"),
	dir("home/nonroot").withMode(0o700).owned(65532, 65532),
	dir("root").withMode(0o700),
	dir("tmp").withMode(0o1777),
}}

// kindImage is one image of the node: its name (the -rootfs name of its own
// layer and the tar's name), its reference, its entrypoint, and whether it
// needs the iptables layer.
func kindImage(platform v1.Platform, name, ref string, iptables bool, entrypoint ...string) imageSpec {
	layers := []layerSource{staticBase}
	if iptables {
		layers = append(layers, rootfsLayer{"iptables"})
	}
	return imageSpec{
		name:     "kind-" + name,
		refs:     []string{ref},
		oci:      true,
		platform: platform,
		config:   v1.Config{Entrypoint: entrypoint, Env: []string{defaultPath}},
		layers:   append(layers, rootfsLayer{name}),
	}
}

func kindImages(t kindTags) []imageSpec {
	const k8s = "registry.k8s.io/"
	kindImage := func(name, ref string, iptables bool, entrypoint ...string) imageSpec {
		return kindImage(t.platform, name, ref, iptables, entrypoint...)
	}
	coredns := kindImage("coredns", k8s+"coredns/coredns:"+t.coredns, false, "/coredns")
	coredns.config.ExposedPorts = map[string]struct{}{"53/tcp": {}, "53/udp": {}}
	return []imageSpec{
		kindImage("kube-apiserver", k8s+"kube-apiserver:"+t.kubernetes, false, "/usr/local/bin/kube-apiserver"),
		kindImage("kube-controller-manager", k8s+"kube-controller-manager:"+t.kubernetes, false, "/usr/local/bin/kube-controller-manager"),
		kindImage("kube-scheduler", k8s+"kube-scheduler:"+t.kubernetes, false, "/usr/local/bin/kube-scheduler"),
		kindImage("kube-proxy", k8s+"kube-proxy:"+t.kubernetes, true, "/usr/local/bin/kube-proxy"),
		kindImage("etcd", k8s+"etcd:"+t.etcd, false, "/usr/local/bin/etcd"),
		coredns,
		kindImage("flannel", "ghcr.io/flannel-io/flannel:"+t.flannel, true, "/opt/bin/flanneld"),
		{
			name:     "kind-pause",
			refs:     []string{k8s + "pause:" + t.pause},
			oci:      true,
			platform: t.platform,
			config:   v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"},
			layers:   []layerSource{rootfsLayer{"pause"}},
		},
	}
}

// buildKind builds (or finds cached) every image of kindImages into
// out/oci/NAME/KEY like build, then writes dest/NAME.tar for each (NAME
// without the "kind-" prefix) and dest/images.txt, a line per image: the
// tar's name and the image's reference.
func buildKind(out, dest string, rootfs map[string]string, t kindTags) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	return withBuilder(out, rootfs, func(b *builder) error {
		var list strings.Builder
		for _, spec := range kindImages(t) {
			_, dir, err := b.buildImage(spec)
			if err != nil {
				return err
			}
			ref, name := spec.refs[0], strings.TrimPrefix(spec.name, "kind-")+".tar"
			p := filepath.Join(dest, name)
			if err := writeAtomic(p, func(w io.Writer) error { return exportLayout(w, dir, ref) }); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			log.Printf("%s: %s", ref, p)
			fmt.Fprintf(&list, "%s %s\n", name, ref)
		}
		return writeFileAtomic(filepath.Join(dest, "images.txt"), []byte(list.String()))
	})
}

// exportLayout writes the one image of the OCI layout dir (as writeLayout
// makes it) as an OCI layout tar whose index names it ref, in both
// annotations importers read: containerd's io.containerd.image.name, and
// org.opencontainers.image.ref.name (full reference, as `ctr export` writes
// it). The tar is the same bytes for the same image: entries sorted, epoch
// times, root-owned.
func exportLayout(w io.Writer, dir, ref string) error {
	ii, desc, err := top(dir)
	if err != nil {
		return err
	}
	img, err := ii.Image(desc.Digest)
	if err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	blobs := []v1.Hash{desc.Digest, m.Config.Digest}
	for _, l := range m.Layers {
		blobs = append(blobs, l.Digest)
	}
	slices.SortFunc(blobs, func(a, b v1.Hash) int { return strings.Compare(a.Hex, b.Hex) })
	blobs = slices.Compact(blobs)

	desc.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref,
	}
	desc.Platform = &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests:     []v1.Descriptor{desc},
	})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	header := func(name string, typ byte, mode, size int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: epoch})
	}
	small := func(name string, data []byte) error {
		if err := header(name, tar.TypeReg, 0o644, int64(len(data))); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := small("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := small("index.json", index); err != nil {
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := header(d, tar.TypeDir, 0o755, 0); err != nil {
			return err
		}
	}
	for _, h := range blobs {
		if err := copyBlob(tw, header, filepath.Join(dir, "blobs", h.Algorithm, h.Hex), "blobs/"+h.Algorithm+"/"+h.Hex); err != nil {
			return err
		}
	}
	return tw.Close()
}

func copyBlob(tw *tar.Writer, header func(string, byte, int64, int64) error, src, name string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := header(name, tar.TypeReg, 0o644, fi.Size()); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err == nil && n != fi.Size() {
		err = fmt.Errorf("%s changed while being archived", src)
	}
	return err
}
