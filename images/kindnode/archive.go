package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// dockerImage loads the root filesystem into Docker as one layer under the
// node's config, written as a `docker save` archive: `docker import` sets
// neither another architecture (Docker 20.10 ignores its --platform) nor a
// stop signal.
func (b *builder) dockerImage(ctx context.Context, dir, root, tag, sum string) error {
	start := time.Now()
	layer := filepath.Join(dir, "layer.tar")
	diffID, err := tarRoot(ctx, root, layer)
	if err != nil {
		return err
	}
	config, err := json.Marshal(nodeConfig(b.arch, sum, diffID))
	if err != nil {
		return err
	}
	archive, w := io.Pipe()
	go func() { w.CloseWithError(writeArchive(w, tag, config, layer)) }()
	err = docker(ctx, archive, nil, "load", "--quiet")
	archive.CloseWithError(io.ErrClosedPipe) // ends the writer if docker did not read it all
	if err != nil {
		return fmt.Errorf("docker load %s: %w", tag, err)
	}
	b.log.Info("image loaded", "tag", tag, "seconds", int(time.Since(start).Seconds()))
	return os.Remove(layer)
}

// nodeConfig is the image's config: the node's entrypoint, environment and
// stop signal, the inputs' hash as a label, and the one layer.
func nodeConfig(arch, sum, diffID string) v1.ConfigFile {
	c := v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: time.Now().UTC().Truncate(time.Second)},
		Config: v1.Config{
			// What a `docker build` gives a base without PATH.
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "container=docker"},
			Entrypoint: []string{"/usr/local/bin/entrypoint", "/sbin/init"},
			// systemd halts on SIGRTMIN+3.
			StopSignal: "SIGRTMIN+3",
			Labels:     map[string]string{"io.berth.node.inputs": sum},
		},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{{Algorithm: "sha256", Hex: diffID}}},
	}
	if arch == "arm64" {
		c.Variant = "v8"
	}
	return c
}

// tarRoot writes the root as an uncompressed layer tar and returns its
// sha256 (the layer's diff id).
func tarRoot(ctx context.Context, root, layer string) (string, error) {
	f, err := os.Create(layer)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	cmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability", "-C", root, "-cf", "-", ".")
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.MultiWriter(f, h), &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("tar the node's root: %w: %s", err, stderr.String())
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

// writeArchive writes what `docker load` reads: the config, the layer and
// manifest.json naming them and the tag.
func writeArchive(w io.Writer, tag string, config []byte, layer string) error {
	sum := sha256.Sum256(config)
	configName := hex.EncodeToString(sum[:]) + ".json"
	manifest, err := json.Marshal([]struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: configName, RepoTags: []string{tag}, Layers: []string{"layer.tar"}}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	add := func(name string, size int64, body io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.Copy(tw, body)
		return err
	}
	if err := add(configName, int64(len(config)), strings.NewReader(string(config))); err != nil {
		return err
	}
	f, err := os.Open(layer)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if err := add("layer.tar", info.Size(), f); err != nil {
		return err
	}
	if err := add("manifest.json", int64(len(manifest)), strings.NewReader(string(manifest))); err != nil {
		return err
	}
	return tw.Close()
}
