package image

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordOfNewerVersion: an image record of a format version this
// berth cannot read (a newer berth's) is left as it is, its image not
// served, and nothing it may hold (layers, blobs) is collected; once it is
// readable again the image is back whole.
func TestRecordOfNewerVersion(t *testing.T) {
	needRoot(t)
	reg := newTestRegistry(t)
	refA := reg.push(t, "a:v1", buildImage(t, "", gzLayer(t, file("a", "a"))))
	refB := reg.push(t, "b:v1", buildImage(t, "", gzLayer(t, file("b", "b"))))
	root := t.TempDir()
	ctx := context.Background()
	s := newService(t, root, Options{})
	idA, err := s.Pull(ctx, refA, nil)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := s.Pull(ctx, refB, nil)
	if err != nil {
		t.Fatal(err)
	}

	// B's record, as a newer berth would write it.
	var recB string
	entries, _ := os.ReadDir(filepath.Join(root, "images"))
	for _, e := range entries {
		p := filepath.Join(root, "images", e.Name())
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(idB)) {
			recB = p
		}
	}
	data, err := os.ReadFile(recB)
	if err != nil || !bytes.HasPrefix(data, []byte(`{"formatVersion":1,`)) {
		t.Fatalf("image record %s: %.60s %v", recB, data, err)
	}
	newer := bytes.Replace(data, []byte(`"formatVersion":1,`), []byte(`"formatVersion":3,`), 1)
	if err := os.WriteFile(recB, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	layersBefore, _ := os.ReadDir(filepath.Join(root, "layers"))

	s = newService(t, root, Options{})
	if _, err := s.Status(refA); err != nil {
		t.Errorf("image a: %v", err)
	}
	if st, err := s.Status(refB); err == nil {
		t.Errorf("image b, its record of version 3, is served: %+v", st)
	}
	if got, _ := os.ReadFile(recB); !bytes.Equal(got, newer) {
		t.Errorf("record %s changed: %.80s", recB, got)
	}
	// Removing a collects nothing: b's record may need what a held.
	if err := s.Remove(ctx, idA); err != nil {
		t.Fatal(err)
	}
	if layers, _ := os.ReadDir(filepath.Join(root, "layers")); len(layers) != len(layersBefore) {
		t.Errorf("layers %v after removing a, %v before: collected while a record of another version is there", layers, layersBefore)
	}

	if err := os.WriteFile(recB, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s = newService(t, root, Options{})
	st, err := s.Status(refB)
	if err != nil || !strings.Contains(st.ID, strings.TrimPrefix(idB, "sha256:")) {
		t.Fatalf("image b once its record is of version 1 again: %+v %v", st, err)
	}
	if err := s.Remove(ctx, idB); err != nil {
		t.Fatal(err)
	}
	assertEmptyStore(t, s)
}
