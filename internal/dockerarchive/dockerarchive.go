// Package dockerarchive writes what `docker load` reads: a `docker save`
// archive of one image (manifest.json, the config, a tar per layer).
// Docker 20.10 loads no OCI layout, and its `docker import` sets neither
// a platform nor a stop signal; this archive carries the config whole.
package dockerarchive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Write writes the archive of the image tagged tag, of config (the image
// config's JSON) and the layer tars at the paths layers, bottom first
// (uncompressed, or compressed as a registry serves them).
func Write(w io.Writer, tag string, config []byte, layers []string) error {
	sum := sha256.Sum256(config)
	entry := struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{Config: hex.EncodeToString(sum[:]) + ".json", RepoTags: []string{tag}}
	tw := tar.NewWriter(w)
	if err := add(tw, entry.Config, int64(len(config)), bytes.NewReader(config)); err != nil {
		return err
	}
	for i, l := range layers {
		name := fmt.Sprintf("%d/layer.tar", i)
		if err := addFile(tw, name, l); err != nil {
			return err
		}
		entry.Layers = append(entry.Layers, name)
	}
	manifest, err := json.Marshal([]any{entry})
	if err != nil {
		return err
	}
	if err := add(tw, "manifest.json", int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return err
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	return add(tw, name, info.Size(), f)
}

func add(tw *tar.Writer, name string, size int64, body io.Reader) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := io.Copy(tw, body)
	return err
}
