package dockerarchive

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: a `docker save` archive whose manifest names the
// config, the layer (byte for byte) and the tag.
func TestWrite(t *testing.T) {
	layer := filepath.Join(t.TempDir(), "layer.tar")
	if err := os.WriteFile(layer, []byte("layer bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, "berth/node:t", []byte(`{"os":"linux"}`), []string{layer}); err != nil {
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
