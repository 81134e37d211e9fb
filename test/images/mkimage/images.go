package main

import (
	"compress/gzip"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The table of test images. To add one: append an imageSpec to images() (or an
// indexSpec to indexes()), made of layer sources from layer.go:
//   - rootfsLayer{"NAME"}: a directory that hack/build-images prepares and passes
//     as -rootfs NAME=DIR (add a prepare_NAME function there for a new one);
//   - entriesLayer: files, directories, links and whiteouts declared here;
//   - randomLayer: seeded incompressible data.
// Give it the references it is pushed as (repository:tag, relative to the
// registry: upstream names minus the registry host, so that a mirror
// configuration can send e.g. registry.k8s.io/e2e-test-images/busybox:1.29-2 to
// the test registry as e2e-test-images/busybox:1.29-2). hack/build-images
// rebuilds only what changed; test/registry checks the references it expects.

// imageSpec is one image.
type imageSpec struct {
	name      string   // unique; the cache directory under $BERTH_IMAGES/oci
	refs      []string // repository:tag; empty for an image pushed only as part of an index
	oci       bool     // OCI media types; false means Docker schema 2 (like most upstream images)
	platform  v1.Platform
	config    v1.Config
	layers    []layerSource
	gzipLevel int // 0 means gzip.DefaultCompression
}

// indexSpec is a multi-platform image index (always OCI media types).
type indexSpec struct {
	name   string
	refs   []string
	images []imageSpec // each with its own platform; their refs are ignored
}

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

var (
	linuxAMD64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	linuxARM64 = v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
)

// onBusybox returns the busybox base layer followed by layers.
func onBusybox(layers ...layerSource) []layerSource {
	return append([]layerSource{rootfsLayer{"busybox"}}, layers...)
}

func busyboxConfig() v1.Config {
	return v1.Config{Cmd: []string{"sh"}, Env: []string{defaultPath}}
}

func images() []imageSpec {
	specs := []imageSpec{
		{
			// critest's default image and the benchmark's image. See
			// hack/build-images (prepare_busybox) for what the rootfs holds.
			name: "busybox",
			refs: []string{
				"e2e-test-images/busybox:1.29-2",
				"library/busybox:latest",
				"library/busybox:1.36",
				// critest -benchmark pulls and lists these (public.ecr.aws/docker/library/...).
				"docker/library/busybox:1.35.0-glibc",
				"docker/library/busybox:1-uclibc",
				"docker/library/busybox:1",
				"docker/library/busybox:1-glibc",
				"docker/library/busybox:1-musl",
			},
			platform: linuxAMD64,
			config:   busyboxConfig(),
			layers:   onBusybox(),
		},
		whiteoutImage(),
		bigImage(),
	}
	specs = append(specs, critestImages()...)
	return specs
}

func indexes() []indexSpec {
	return append(critestIndexes(), indexSpec{
		name: "multiarch",
		refs: []string{"berth-test/multiarch:latest"},
		images: []imageSpec{
			{
				name:     "multiarch-amd64",
				oci:      true,
				platform: linuxAMD64,
				config:   busyboxConfig(),
				layers:   onBusybox(entriesLayer{"arch marker", []entry{file("arch", "amd64")}}),
			},
			{
				// Never run: it only has to be told apart from the amd64 one.
				name:     "multiarch-arm64",
				oci:      true,
				platform: linuxARM64,
				config:   v1.Config{Cmd: []string{"/arch"}, Env: []string{defaultPath}},
				layers:   []layerSource{entriesLayer{"arch marker", []entry{file("arch", "arm64")}}},
			},
		},
	})
}

// whiteoutImage exercises what a layer unpacker must get right. Its layers,
// after the busybox base (everything is under /wh):
//
//	layer 1: wh/ keep.txt gone.txt gonedir/x.txt opaque/{a.txt,b.txt,sub/c.txt}
//	         recreated.txt="version 1\n" links/orig.txt links/hard.txt (hard link to orig.txt)
//	layer 2: .wh.gone.txt  .wh.gonedir  opaque/.wh..wh..opq + opaque/new.txt
//	         .wh.recreated.txt  links/rel-symlink -> orig.txt  links/abs-symlink -> /wh/keep.txt
//	         setuid (04755 root)  private/ (0700, 1000:1000) private/secret.txt (0600, 1000:1000)
//	layer 3: recreated.txt="version 3\n"  owned.txt (0640, 1000:1000)
//	         layer3-hard.txt (hard link to owned.txt, within this layer)
//
// The merged tree an unpacker must produce (mode, uid:gid, content):
//
//	/wh                      dir  0755 0:0
//	/wh/keep.txt             file 0644 0:0 "keep\n"
//	/wh/opaque               dir  0755 0:0   only new.txt: a.txt, b.txt and sub/ are hidden
//	/wh/opaque/new.txt       file 0644 0:0 "new\n"
//	/wh/recreated.txt        file 0644 0:0 "version 3\n"   (deleted in 2, recreated in 3)
//	/wh/links/orig.txt       file 0644 0:0 "hard\n"
//	/wh/links/hard.txt       hard link: same inode as orig.txt (link count 2)
//	/wh/links/rel-symlink    symlink -> "orig.txt"
//	/wh/links/abs-symlink    symlink -> "/wh/keep.txt"
//	/wh/setuid               file 04755 0:0 "#!/bin/sh\necho setuid\n"
//	/wh/private              dir  0700 1000:1000
//	/wh/private/secret.txt   file 0600 1000:1000 "secret\n"
//	/wh/owned.txt            file 0640 1000:1000 "owned\n"
//	/wh/layer3-hard.txt      hard link: same inode as owned.txt
//	absent: /wh/gone.txt, /wh/gonedir, /wh/opaque/a.txt, /wh/opaque/b.txt, /wh/opaque/sub,
//	        and no .wh.* file anywhere
//
// The whole busybox tree is there too, unchanged.
func whiteoutImage() imageSpec {
	return imageSpec{
		name:     "whiteout",
		refs:     []string{"berth-test/whiteout:latest"},
		oci:      true,
		platform: linuxAMD64,
		config:   busyboxConfig(),
		layers: onBusybox(
			entriesLayer{"whiteout test: layer 1", []entry{
				dir("wh"),
				file("wh/keep.txt", "keep\n"),
				file("wh/gone.txt", "gone\n"),
				dir("wh/gonedir"),
				file("wh/gonedir/x.txt", "x\n"),
				dir("wh/opaque"),
				file("wh/opaque/a.txt", "a\n"),
				file("wh/opaque/b.txt", "b\n"),
				dir("wh/opaque/sub"),
				file("wh/opaque/sub/c.txt", "c\n"),
				file("wh/recreated.txt", "version 1\n"),
				dir("wh/links"),
				file("wh/links/orig.txt", "hard\n"),
				hardlink("wh/links/hard.txt", "wh/links/orig.txt"),
			}},
			entriesLayer{"whiteout test: layer 2", []entry{
				dir("wh"),
				whiteout("wh/gone.txt"),
				whiteout("wh/gonedir"),
				dir("wh/opaque"),
				opaque("wh/opaque"),
				file("wh/opaque/new.txt", "new\n"),
				whiteout("wh/recreated.txt"),
				dir("wh/links"),
				symlink("wh/links/rel-symlink", "orig.txt"),
				symlink("wh/links/abs-symlink", "/wh/keep.txt"),
				file("wh/setuid", "#!/bin/sh\necho setuid\n").withMode(0o4755),
				dir("wh/private").withMode(0o700).owned(1000, 1000),
				file("wh/private/secret.txt", "secret\n").withMode(0o600).owned(1000, 1000),
			}},
			entriesLayer{"whiteout test: layer 3", []entry{
				dir("wh"),
				file("wh/recreated.txt", "version 3\n"),
				file("wh/owned.txt", "owned\n").withMode(0o640).owned(1000, 1000),
				hardlink("wh/layer3-hard.txt", "wh/owned.txt"),
			}},
		),
	}
}

// bigImage is for pull benchmarks: 5 layers of 20 MiB of incompressible data
// each (~100 MiB), gzip level 1 (the data does not compress anyway).
func bigImage() imageSpec {
	spec := imageSpec{
		name:      "big",
		refs:      []string{"berth-test/big:latest"},
		oci:       true,
		platform:  linuxAMD64,
		config:    v1.Config{Env: []string{defaultPath}},
		gzipLevel: gzip.BestSpeed,
	}
	for i := 1; i <= 5; i++ {
		spec.layers = append(spec.layers, randomLayer{
			path: "big/layer-" + string(rune('0'+i)) + ".bin",
			seed: uint64(i),
			size: 20 << 20,
		})
	}
	return spec
}
