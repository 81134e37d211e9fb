package main

import (
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

	"github.com/berth-runtime/berth/internal/dockerarchive"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// dockerImage loads the root filesystem into Docker as one layer under the
// node's config, as a `docker save` archive: `docker import` sets neither
// another architecture (Docker 20.10 ignores its --platform) nor a stop
// signal.
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
	go func() { w.CloseWithError(dockerarchive.Write(w, tag, config, []string{layer})) }()
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
