package image

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"testing"
)

// BenchmarkUnpackLayerSync compares the ways of making an unpacked layer
// durable (sync.go): fsync of what the layer wrote, in parallel, against
// one syncfs per layer. Run on the disk the store lives on, with whatever
// else writes to it meanwhile:
//
//	go test ./image/ -run - -bench UnpackLayerSync -benchtime 10x
func BenchmarkUnpackLayerSync(b *testing.B) {
	if testing.Short() {
		b.Skip("writes hundreds of MB")
	}
	big := make([]byte, 64<<20)
	rand.Read(big)
	var small []entry
	for d := range 20 {
		small = append(small, dir(fmt.Sprintf("d%d", d)))
		for f := range 100 {
			body := make([]byte, 8<<10)
			rand.Read(body)
			small = append(small, file(fmt.Sprintf("d%d/f%d", d, f), string(body)))
		}
	}
	layers := []struct {
		name    string
		entries []entry
	}{
		{"one 64MiB file", []entry{file("big", string(big))}},
		{"2000 files of 8KiB", small},
	}
	modes := []struct {
		name string
		mode int
	}{{"published, flushed after", syncDeferred}, {"fsync at the end", syncFiles}, {"fsync each", syncEach}, {"syncfs", syncFilesystem}}
	for _, l := range layers {
		layer := gzLayer(b, l.entries...)
		rc, err := layer.Compressed()
		if err != nil {
			b.Fatal(err)
		}
		blob, err := io.ReadAll(rc)
		if err != nil {
			b.Fatal(err)
		}
		diffID, _ := layer.DiffID()
		digest, _ := layer.Digest()
		ref := layerRef{ChainID: diffID.String(), DiffID: diffID.String(), Digest: digest.String(), Size: int64(len(blob))}
		for _, m := range modes {
			b.Run(l.name+"/"+m.name, func(b *testing.B) {
				s := newService(b, b.TempDir(), Options{})
				s.syncMode = m.mode
				b.SetBytes(int64(len(blob)))
				for b.Loop() {
					s.pin([]string{ref.ChainID})
					if err := s.unpackLayer(b.Context(), bytes.NewReader(blob), ref); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := s.Flush(b.Context()); err != nil {
						b.Fatal(err)
					}
					s.unpin([]string{ref.ChainID})
					b.StartTimer()
				}
			})
		}
	}
}

// TestPendingLayerAfterRestart plays a berth that died between publishing
// a layer and flushing it: restarted on the same boot it keeps the layer
// (the page cache holds it) and flushes it; after a reboot (another boot
// ID, a power cut) it drops the layer and the image that needs it, so no
// layer whose files may be empty is ever used.
func TestPendingLayerAfterRestart(t *testing.T) {
	needRoot(t)
	reg := newTestRegistry(t)
	img := buildImage(t, "", gzLayer(t, dir("etc"), file("etc/base", "b")), gzLayer(t, file("top", "t")))
	ref := reg.push(t, "pending:v1", img)
	for _, tc := range []struct {
		name, restartBoot string
		kept              bool
	}{
		{"same boot", "boot-a", true},
		{"after a reboot", "boot-b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			root := t.TempDir()
			s := newService(t, root, Options{BootID: "boot-a"})
			id, err := s.Pull(ctx, ref, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := s.Status(ref)
			if err != nil {
				t.Fatal(err)
			}
			top := st.Layers[len(st.Layers)-1].ChainID
			rec, err := s.layerRecs.Get(digestHex(top))
			if err != nil {
				t.Fatal(err)
			}
			if rec.PendingBoot != "" {
				t.Fatalf("layer %s still pending on %q after Flush", top, rec.PendingBoot)
			}
			// As the record was before its flush; berth is gone.
			rec.PendingBoot = "boot-a"
			if err := s.layerRecs.Put(digestHex(top), rec); err != nil {
				t.Fatal(err)
			}

			s2 := newService(t, root, Options{BootID: tc.restartBoot})
			if err := s2.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if !tc.kept {
				assertEmptyStore(t, s2)
				return
			}
			st2, err := s2.Status(ref)
			if err != nil || st2.ID != id {
				t.Fatalf("image after a restart on the same boot: %+v, %v; want %s", st2, err, id)
			}
			rec, err = s2.layerRecs.Get(digestHex(top))
			if err != nil {
				t.Fatal(err)
			}
			if rec.PendingBoot != "" {
				t.Errorf("layer %s still pending on %q after the restart's flush", top, rec.PendingBoot)
			}
		})
	}
}
