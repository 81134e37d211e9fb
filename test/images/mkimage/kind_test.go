package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var testTags = kindTags{kubernetes: "v1.37.2", etcd: "3.7.0-0", coredns: "v1.14.6", pause: "3.10.2", flannel: "v0.28.10", platform: linuxAMD64}

// TestKind builds the kind table from fake root filesystems twice (the second
// time from the cache) and checks every tar: an OCI layout whose index names
// the image by its reference, every blob there and matching its digest, the
// same bytes both times.
func TestKind(t *testing.T) {
	fake := fakeRootfs(t)
	rootfs := map[string]string{}
	for _, s := range kindImages(testTags) {
		for _, l := range s.layers {
			if r, ok := l.(rootfsLayer); ok {
				rootfs[r.name] = fake
			}
		}
	}
	out := t.TempDir()
	first, again := t.TempDir(), t.TempDir()
	if err := buildKind(out, first, rootfs, testTags); err != nil {
		t.Fatal(err)
	}
	if err := buildKind(out, again, rootfs, testTags); err != nil {
		t.Fatal(err)
	}

	list, err := os.ReadFile(filepath.Join(first, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := "kube-apiserver.tar registry.k8s.io/kube-apiserver:v1.37.2\n" +
		"kube-controller-manager.tar registry.k8s.io/kube-controller-manager:v1.37.2\n" +
		"kube-scheduler.tar registry.k8s.io/kube-scheduler:v1.37.2\n" +
		"kube-proxy.tar registry.k8s.io/kube-proxy:v1.37.2\n" +
		"etcd.tar registry.k8s.io/etcd:3.7.0-0\n" +
		"coredns.tar registry.k8s.io/coredns/coredns:v1.14.6\n" +
		"flannel.tar ghcr.io/flannel-io/flannel:v0.28.10\n" +
		"pause.tar registry.k8s.io/pause:3.10.2\n"
	if string(list) != want {
		t.Errorf("images.txt = %q, want %q", list, want)
	}

	baseLayers := map[string]bool{}
	for _, s := range kindImages(testTags) {
		name := strings.TrimPrefix(s.name, "kind-") + ".tar"
		a, err := os.ReadFile(filepath.Join(first, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(again, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the cached build wrote other bytes", name)
		}
		ref := s.refs[0]
		hdrs, data, order := readTar(t, bytes.NewReader(a))
		if len(order) < 4 || strings.Join(order[:4], " ") != "oci-layout index.json blobs blobs/sha256" {
			t.Errorf("%s: entries begin %v", name, order)
		}
		for n, h := range hdrs {
			if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s: %s: mtime %v owner %d:%d", name, n, h.ModTime, h.Uid, h.Gid)
			}
		}
		for n, d := range data {
			if hexDigest, ok := strings.CutPrefix(n, "blobs/sha256/"); ok {
				sum := sha256.Sum256([]byte(d))
				if hex.EncodeToString(sum[:]) != hexDigest {
					t.Errorf("%s: %s does not match its digest", name, n)
				}
			}
		}
		var index v1.IndexManifest
		if err := json.Unmarshal([]byte(data["index.json"]), &index); err != nil || len(index.Manifests) != 1 {
			t.Fatalf("%s: index.json %q: %v", name, data["index.json"], err)
		}
		d := index.Manifests[0]
		if d.Annotations["io.containerd.image.name"] != ref || d.Annotations["org.opencontainers.image.ref.name"] != ref {
			t.Errorf("%s: annotations %v, want both %s", name, d.Annotations, ref)
		}
		if d.Platform == nil || d.Platform.String() != "linux/amd64" {
			t.Errorf("%s: platform %v", name, d.Platform)
		}
		var m v1.Manifest
		if err := json.Unmarshal([]byte(data["blobs/sha256/"+d.Digest.Hex]), &m); err != nil {
			t.Fatalf("%s: manifest: %v", name, err)
		}
		var cf v1.ConfigFile
		if err := json.Unmarshal([]byte(data["blobs/sha256/"+m.Config.Digest.Hex]), &cf); err != nil {
			t.Fatalf("%s: config: %v", name, err)
		}
		if strings.Join(cf.Config.Entrypoint, " ") != strings.Join(s.config.Entrypoint, " ") {
			t.Errorf("%s: entrypoint %v, want %v", name, cf.Config.Entrypoint, s.config.Entrypoint)
		}
		if len(m.Layers) != len(s.layers) {
			t.Errorf("%s: %d layers, want %d", name, len(m.Layers), len(s.layers))
		}
		for _, l := range m.Layers {
			if _, ok := data["blobs/sha256/"+l.Digest.Hex]; !ok {
				t.Errorf("%s: layer %s missing", name, l.Digest)
			}
		}
		if _, ok := s.layers[0].(entriesLayer); ok {
			baseLayers[m.Layers[0].Digest.String()] = true
		}
	}
	// One base layer for all, stored once in the node.
	if len(baseLayers) != 1 {
		t.Errorf("static base layers %v, want one digest", baseLayers)
	}
}

// TestKindPlatform: every image of the table is of the binaries' platform.
func TestKindPlatform(t *testing.T) {
	for _, p := range []v1.Platform{linuxAMD64, linuxARM64} {
		tags := testTags
		tags.platform = p
		for _, s := range kindImages(tags) {
			if s.platform.Architecture != p.Architecture || s.platform.OS != "linux" {
				t.Errorf("%s for %s: platform %+v", s.name, p.Architecture, s.platform)
			}
		}
	}
}
