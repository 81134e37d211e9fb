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
	}{{"fsync at the end", syncFiles}, {"fsync each", syncEach}, {"syncfs", syncFilesystem}}
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
				defer func(old int) { layerSyncMode = old }(layerSyncMode)
				layerSyncMode = m.mode
				s := newService(b, b.TempDir(), Options{})
				b.SetBytes(int64(len(blob)))
				for b.Loop() {
					s.pin([]string{ref.ChainID})
					if err := s.unpackLayer(b.Context(), bytes.NewReader(blob), ref); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					s.unpin([]string{ref.ChainID})
					b.StartTimer()
				}
			})
		}
	}
}
