package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images Kubernetes' e2e suites (test/e2e_node's NodeConformance specs
// and test/e2e/common, k8s.io/kubernetes v1.37.2) pull, under the names of
// test/utils/image/manifest.go, rebuilt offline by hack/e2e-images. They are
// kept out of images() so that hack/registry, which every test run starts,
// does not build agnhost unless asked (hack/registry --e2e). A mirror
// configuration (hack/e2e-images writes a hosts.toml) sends registry.k8s.io
// to the test registry, so each reference is the upstream name minus its
// registry host.
//
// What the specs use of each:
//   - agnhost:2.66.1 and agnhost:2.55 (pods, probes, hooks, volumes, most of
//     test/e2e/common): /agnhost (the entrypoint; its subcommands serve HTTP,
//     gRPC, TLS with /localhost.crt and .key, and more), /agnhost-2 (a link,
//     the entrypoint-tester specs override the entrypoint with it), and the
//     tools the specs exec in it: sh, bash, curl, dig, nc, ip, getent; user
//     user-defined-in-image (1000) in group group-defined-in-image (50000),
//     for the supplemental-groups specs. Two versions with different image
//     ids: the image-update specs change a pod from one to the other.
//   - busybox:1.37.0-2 (and 1.36.1-1, hard-coded by the memory QoS specs):
//     the critest busybox (images.go) but with upstream's busybox 1.37.0
//     (hack/e2e-busybox): its nmeter stamps the container lifecycle specs'
//     lines, its sh passes on environment names like data-1 (the ConfigMap
//     and Secret env specs), Debian's has neither. ipc-utils:1.4 (the host
//     IPC specs run ipcs in it) is the same image: it carries util-linux's ipcs.
//   - nginx:1.27.0-2 and nginx:1.28.0-2: a web server on :80 serving a
//     default page, two distinct images (pod-update specs).
//   - nonewprivs:1.4: the setuid /usr/local/bin/nnp, printing its effective uid.
//   - nonroot:1.5: busybox whose default user is 1234 (runAsNonRoot specs).
//   - glibc-dns-testing:2.1.1: glibc's resolver behind hostname -f, dig and
//     /coredns (the hostname/FQDN specs run `hostname; hostname -f`).
//   - pause:3.10.2: the kubelet's default pause, run as a plain container by
//     some specs; agnhost's fake registry (fake-registry-server) serves it
//     as pause:testing.
//   - kitten:1.8 and nautilus:1.8 (image volumes): agnhost plus /data.json
//     naming its picture, the picture, and upstream's base's /etc/os-release
//     (the image volume spec reads it).
//   - sample-apiserver:1.29.2 (e2e.test's Aggregator spec): k8s.io/sample-apiserver
//     v0.29.2's server, /sample-apiserver, its entrypoint; on busybox, as
//     upstream's is on alpine.
//
// Not rebuilt (docs/conformance.md names the specs): an image pinned by
// digest (busybox@sha256:a9155b...). invalid.registry.k8s.io must not exist:
// its pulls go to the test registry too, which has no such image.

// e2eVersions are the versions of the e2e images that come from the
// command line (hack/e2e-images): what the binaries in them were built as.
type e2eVersions struct {
	agnhost []string // agnhost's tags, each with a -rootfs agnhost-TAG
}

const e2eRepo = "e2e-test-images/"

// agnhostLayers are an agnhost image's layers: the userland, the fake
// registry's files, then the tag's binary.
func agnhostLayers(tag string, fakeRegistry layerSource) []layerSource {
	return onE2EBusybox(rootfsLayer{"e2e-userland"}, rootfsLayer{"coredns"}, rootfsLayer{"agnhost-files"}, fakeRegistry, rootfsLayer{"agnhost-" + tag})
}

// onE2EBusybox is onBusybox, whose rootfs hack/e2e-images makes of
// upstream's busybox.
func onE2EBusybox(layers ...layerSource) []layerSource {
	return onBusybox(layers...)
}

// fakeRegistryLayer is what `agnhost fake-registry-server` serves, in the
// layout it reads (/var/registry/NAME/{manifests,blobs}/sha256/XX/HASH/data,
// and manifests/TAG holding the digest a tag names): upstream's copies
// registry.k8s.io/pause:3.10.2 there as pause:testing, here it is the
// pause:3.10.2 of this table. The specs that run it (the [Serial] private
// registry pulls) pull localhost:5000/pause:testing.
func fakeRegistryLayer(pause v1.Image) (layerSource, error) {
	const root = "var/registry/pause"
	entries := []entry{dir("var"), dir("var/registry"), dir(root), dir(root + "/manifests"), dir(root + "/blobs")}
	made := map[string]bool{}
	add := func(kind string, h v1.Hash, data []byte) {
		d := root + "/" + kind + "/" + h.Algorithm
		for _, p := range []string{d, d + "/" + h.Hex[:2], d + "/" + h.Hex[:2] + "/" + h.Hex} {
			if !made[p] {
				entries = append(entries, dir(p))
				made[p] = true
			}
		}
		entries = append(entries, file(d+"/"+h.Hex[:2]+"/"+h.Hex+"/data", string(data)))
	}
	manifest, err := pause.RawManifest()
	if err != nil {
		return nil, err
	}
	digest, err := pause.Digest()
	if err != nil {
		return nil, err
	}
	entries = append(entries, file(root+"/manifests/testing", digest.String()))
	add("manifests", digest, manifest)
	config, err := pause.RawConfigFile()
	if err != nil {
		return nil, err
	}
	configName, err := pause.ConfigName()
	if err != nil {
		return nil, err
	}
	add("blobs", configName, config)
	layers, err := pause.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		h, err := l.Digest()
		if err != nil {
			return nil, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		add("blobs", h, data)
	}
	return entriesLayer{"agnhost's fake registry: pause:testing", entries}, nil
}

func agnhostConfig() v1.Config {
	return v1.Config{
		Entrypoint: []string{"/agnhost"},
		Cmd:        []string{"pause"},
		Env:        []string{defaultPath},
		ExposedPorts: map[string]struct{}{
			"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {},
		},
	}
}

// e2eNginx is the nginx of critest's images on busybox, with the default
// page of upstream's image and the tag in a label, so that two tags are two
// image ids, as upstream's two versions are.
func e2eNginx(tag string) imageSpec {
	cfg := nginxConfig()
	cfg.StopSignal = "SIGQUIT" // as upstream's nginx >= 1.19: a graceful stop
	cfg.Labels = map[string]string{"org.opencontainers.image.version": tag}
	return imageSpec{
		name:     "e2e-nginx-" + tag,
		refs:     []string{e2eRepo + "nginx:" + tag},
		platform: linuxAMD64,
		config:   cfg,
		layers: onE2EBusybox(rootfsLayer{"nginx"}, entriesLayer{"the default page", []entry{
			dir("usr"), dir("usr/share"), dir("usr/share/nginx"), dir("usr/share/nginx/html"),
			file("usr/share/nginx/html/index.html", "<!DOCTYPE html>\n<html>\n<head><title>Welcome to nginx!</title></head>\n"+
				"<body>\n<h1>Welcome to nginx!</h1>\n<p>If you see this page, the nginx web server is successfully installed and working.</p>\n</body>\n</html>\n"),
		}}),
	}
}

// alpineOSRelease is the /etc/os-release of upstream's agnhost base
// (alpine:3.21), which kitten and nautilus are built on: e2e.test's
// Conformance spec for image volumes reads it through the volume and looks
// for "Alpine Linux". Only these two images carry it, as a fixture of
// that spec; the files of the image are otherwise this table's.
var alpineOSRelease = entriesLayer{"upstream's base's /etc/os-release", []entry{
	dir("etc"),
	file("etc/os-release", "NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.21.3\nPRETTY_NAME=\"Alpine Linux v3.21\"\n"+
		"HOME_URL=\"https://alpinelinux.org/\"\nBUG_REPORT_URL=\"https://gitlab.alpinelinux.org/alpine/aports/-/issues\"\n"),
}}

// volumeImage is kitten or nautilus: agnhost serving its picture.
func volumeImage(name, agnhostTag string, fakeRegistry layerSource) imageSpec {
	cfg := agnhostConfig()
	cfg.Cmd = []string{"test-webserver"}
	return imageSpec{
		name:     "e2e-" + name,
		refs:     []string{e2eRepo + name + ":1.8"},
		platform: linuxAMD64,
		config:   cfg,
		layers:   append(agnhostLayers(agnhostTag, fakeRegistry), alpineOSRelease, rootfsLayer{name}),
	}
}

// e2ePause is the pause image, built first: agnhost's fake registry holds it.
func e2ePause() imageSpec {
	return imageSpec{
		name:     "e2e-pause",
		refs:     []string{"pause:3.10.2"},
		platform: linuxAMD64,
		config:   v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"},
		layers:   []layerSource{rootfsLayer{"pause"}},
	}
}

// e2eImages is the table but e2ePause; fakeRegistry is agnhost's layer of
// it (fakeRegistryLayer).
func e2eImages(v e2eVersions, fakeRegistry layerSource) []imageSpec {
	var specs []imageSpec
	for _, tag := range v.agnhost {
		specs = append(specs, imageSpec{
			name:     "e2e-agnhost-" + tag,
			refs:     []string{e2eRepo + "agnhost:" + tag},
			platform: linuxAMD64,
			config:   agnhostConfig(),
			layers:   agnhostLayers(tag, fakeRegistry),
		})
	}
	nonroot := busyboxConfig()
	nonroot.User = "1234"
	specs = append(specs,
		imageSpec{
			name:     "e2e-busybox",
			refs:     []string{e2eRepo + "busybox:1.37.0-2", e2eRepo + "busybox:1.36.1-1", e2eRepo + "ipc-utils:1.4"},
			platform: linuxAMD64,
			config:   busyboxConfig(),
			layers:   onE2EBusybox(),
		},
		e2eNginx("1.27.0-2"),
		e2eNginx("1.28.0-2"),
		imageSpec{
			name:     "e2e-nonewprivs",
			refs:     []string{e2eRepo + "nonewprivs:1.4"},
			platform: linuxAMD64,
			config:   v1.Config{Cmd: []string{"nnp"}, Env: []string{defaultPath}},
			layers:   onE2EBusybox(rootfsLayer{"nonewprivs"}),
		},
		imageSpec{
			name:     "e2e-nonroot",
			refs:     []string{e2eRepo + "nonroot:1.5"},
			platform: linuxAMD64,
			config:   nonroot,
			layers:   onE2EBusybox(),
		},
		imageSpec{
			name:     "e2e-sample-apiserver",
			refs:     []string{e2eRepo + "sample-apiserver:1.29.2"},
			platform: linuxAMD64,
			config:   v1.Config{Entrypoint: []string{"/sample-apiserver"}, Env: []string{defaultPath}},
			layers:   onE2EBusybox(rootfsLayer{"sample-apiserver"}),
		},
		imageSpec{
			name:     "e2e-glibc-dns-testing",
			refs:     []string{e2eRepo + "glibc-dns-testing:2.1.1"},
			platform: linuxAMD64,
			config:   v1.Config{Cmd: []string{"bash"}, Env: []string{defaultPath}},
			layers:   onE2EBusybox(rootfsLayer{"e2e-userland"}, rootfsLayer{"coredns"}),
		},
	)
	if len(v.agnhost) > 0 {
		newest := v.agnhost[0]
		specs = append(specs, volumeImage("kitten", newest, fakeRegistry), volumeImage("nautilus", newest, fakeRegistry))
	}
	return specs
}

// e2eCurrent is the file of $BERTH_IMAGES that lists the e2e images built
// last (push -current reads it).
const e2eCurrent = "e2e.json"

// buildE2E builds (or finds cached) every image of e2eImages and writes
// out/e2e.json.
func buildE2E(out string, rootfs map[string]string, v e2eVersions) error {
	return withBuilder(out, rootfs, func(b *builder) error {
		var current []builtImage
		record := func(spec imageSpec) (v1.Image, error) {
			img, dir, err := b.buildImage(spec)
			if err != nil {
				return nil, err
			}
			d, err := img.Digest()
			if err != nil {
				return nil, err
			}
			current = append(current, builtImage{Name: spec.name, Refs: spec.refs, Layout: dir, Digest: d.String()})
			return img, nil
		}
		pause, err := record(e2ePause())
		if err != nil {
			return err
		}
		fakeRegistry, err := fakeRegistryLayer(pause)
		if err != nil {
			return fmt.Errorf("fake registry: %w", err)
		}
		for _, spec := range e2eImages(v, fakeRegistry) {
			if _, err := record(spec); err != nil {
				return err
			}
		}
		data, err := json.MarshalIndent(current, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(out, e2eCurrent), append(data, '\n')); err != nil {
			return fmt.Errorf("%s: %w", e2eCurrent, err)
		}
		return nil
	})
}
