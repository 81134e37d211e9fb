package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestNodeConfig(t *testing.T) {
	for _, tc := range []struct{ arch, variant string }{
		{"amd64", ""},
		{"arm64", "v8"},
	} {
		c := nodeConfig(tc.arch, "inputs", "abc")
		if c.Architecture != tc.arch || c.Variant != tc.variant || c.OS != "linux" {
			t.Errorf("%s: platform %s/%s/%s", tc.arch, c.OS, c.Architecture, c.Variant)
		}
		if c.Config.StopSignal != "SIGRTMIN+3" || len(c.Config.Entrypoint) != 2 || c.Config.Labels["io.berth.node.inputs"] != "inputs" {
			t.Errorf("%s: config %+v", tc.arch, c.Config)
		}
		if len(c.RootFS.DiffIDs) != 1 || c.RootFS.DiffIDs[0].String() != "sha256:abc" {
			t.Errorf("%s: diff ids %v", tc.arch, c.RootFS.DiffIDs)
		}
	}
}

// TestWriteArchive: a `docker save` archive whose manifest names the
// config, the layer (byte for byte) and the tag.
func TestWriteArchive(t *testing.T) {
	layer := filepath.Join(t.TempDir(), "layer.tar")
	if err := os.WriteFile(layer, []byte("layer bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeArchive(&buf, "berth/node:t", []byte(`{"os":"linux"}`), layer); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = string(data)
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal([]byte(files["manifest.json"]), &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json %q: %v", files["manifest.json"], err)
	}
	m := manifest[0]
	if files[m.Config] != `{"os":"linux"}` || len(m.RepoTags) != 1 || m.RepoTags[0] != "berth/node:t" ||
		len(m.Layers) != 1 || files[m.Layers[0]] != "layer bytes" {
		t.Errorf("archive %v, manifest %+v", files, m)
	}
}
