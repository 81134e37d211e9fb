package image

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestRemove(t *testing.T) {
	needRoot(t)
	shared := gzLayer(t, file("shared", "s"))
	img1 := buildImage(t, "", shared, gzLayer(t, file("one", "1")))
	img2 := buildImage(t, "", shared, gzLayer(t, file("two", "2")))
	reg := newTestRegistry(t)
	ref1 := reg.push(t, "a:v1", img1)
	ref1b := reg.push(t, "a:v1b", img1)
	ref1c := reg.push(t, "other:x", img1)
	ref2 := reg.push(t, "b:v1", img2)
	digest1 := reg.host + "/a@" + imageDigest(t, img1)
	ctx := context.Background()

	for _, by := range []string{"tag", "other tag", "id", "short id", "digest"} {
		t.Run(by, func(t *testing.T) {
			s := newService(t, t.TempDir(), Options{})
			for _, r := range []string{ref1, ref1b, ref1c, ref2} {
				if _, err := s.Pull(ctx, r, nil); err != nil {
					t.Fatal(err)
				}
			}
			id := configDigest(t, img1)
			name := map[string]string{"tag": ref1, "other tag": ref1c, "id": id, "short id": id[7:20], "digest": digest1}[by]
			st1, _ := s.Status(ref1)
			st2, _ := s.Status(ref2)
			if err := s.Remove(ctx, name); err != nil {
				t.Fatal(err)
			}
			for _, r := range []string{ref1, ref1b, ref1c, digest1, id} {
				if _, err := s.Status(r); err == nil {
					t.Errorf("%s still resolves after removing by %s", r, by)
				}
			}
			if _, err := os.Stat(st1.Layers[1].Dir); !os.IsNotExist(err) {
				t.Errorf("own layer kept: %v", err)
			}
			if _, err := os.Stat(st1.Layers[0].Dir); err != nil {
				t.Errorf("shared layer removed: %v", err)
			}
			if got, err := s.Status(ref2); err != nil || got.ID != st2.ID {
				t.Errorf("other image: %v", err)
			}
			if err := s.Remove(ctx, ref2); err != nil {
				t.Fatal(err)
			}
			assertEmptyStore(t, s)
		})
	}

	t.Run("unknown", func(t *testing.T) {
		s := newService(t, t.TempDir(), Options{})
		for _, r := range []string{"busybox", reg.host + "/nothing:here", "sha256:" + configDigest(t, img1)[7:]} {
			if err := s.Remove(ctx, r); err != nil {
				t.Errorf("remove %s: %v", r, err)
			}
		}
		if err := s.Remove(ctx, "Not A Ref"); err == nil {
			t.Error("malformed reference accepted")
		}
	})
}

func TestTagMovesToNewImage(t *testing.T) {
	needRoot(t)
	reg := newTestRegistry(t)
	old := buildImage(t, "", gzLayer(t, file("v", "1")))
	ref := reg.push(t, "app:latest", old)
	s := newService(t, t.TempDir(), Options{})
	ctx := context.Background()
	oldID, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	newer := buildImage(t, "", gzLayer(t, file("v", "2")))
	reg.push(t, "app:latest", newer)
	newID, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Status(ref); st.ID != newID {
		t.Errorf("tag names %s, want the new image %s", st.ID, newID)
	}
	st, err := s.Status(oldID)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.RepoTags) != 0 || len(st.RepoDigests) != 1 {
		t.Errorf("old image: tags %v digests %v; want no tags and its digest", st.RepoTags, st.RepoDigests)
	}
}

func TestLeaseKeepsLayers(t *testing.T) {
	needRoot(t)
	reg := newTestRegistry(t)
	img := buildImage(t, "", gzLayer(t, file("a", "a")), gzLayer(t, file("b", "b")))
	ref := reg.push(t, "app:v1", img)
	root := t.TempDir()
	s := newService(t, root, Options{})
	ctx := context.Background()
	if _, err := s.Pull(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	leased, err := s.Lease(ctx, "container-1", ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Status(ref); err == nil {
		t.Error("image still listed")
	}
	check := func(want bool) {
		t.Helper()
		for _, d := range leased.LowerDirs() {
			if _, err := os.Stat(d); (err == nil) != want {
				t.Errorf("layer %s exists=%v, want %v", filepath.Base(d), err == nil, want)
			}
		}
	}
	check(true)
	// A restart keeps the lease.
	s = newService(t, root, Options{})
	check(true)
	if got := s.Holders(); len(got) != 1 || got[0] != "container-1" {
		t.Errorf("holders %v", got)
	}
	if err := s.Release(ctx, "container-1"); err != nil {
		t.Fatal(err)
	}
	check(false)
	if err := s.Release(ctx, "container-1"); err != nil {
		t.Errorf("second release: %v", err)
	}
	assertEmptyStore(t, s)
}

func TestRestart(t *testing.T) {
	needRoot(t)
	reg := newTestRegistry(t)
	img := buildImage(t, "www-data", gzLayer(t, file("a", "a")))
	ref := reg.push(t, "app:v1", img)
	root := t.TempDir()
	s := newService(t, root, Options{PinnedImages: []string{ref}})
	ctx := context.Background()
	id, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Status(ref)

	// Debris of a crash: an unfinished layer, a layer whose record was
	// never written, a half-written record, an unreferenced blob.
	for _, d := range []string{".tmp-abc-1/x", ".tmp-del-abc-2", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef/etc"} {
		if err := os.MkdirAll(filepath.Join(root, "layers", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "images", ".tmp-x-1"), []byte("{"), 0o600)
	os.WriteFile(filepath.Join(root, "content", "sha256", ".tmp-x"), []byte("x"), 0o600)

	s = newService(t, root, Options{PinnedImages: []string{ref}})
	after, err := s.Status(ref)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != id || !equal(after.RepoTags, before.RepoTags) || !equal(after.RepoDigests, before.RepoDigests) ||
		after.Size != before.Size || after.Username != "www-data" || !after.Pinned || string(after.Config) != string(before.Config) {
		t.Errorf("after restart %+v\nbefore %+v", after, before)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "layers"))
	if len(entries) != 1 {
		t.Errorf("layers after restart: %v", entries)
	}
	if err := s.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertEmptyStore(t, s)
}
