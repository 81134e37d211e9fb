package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"
)

// pushLayerCommand pushes an image of one layer holding one file of -size
// pseudo-random bytes (the same bytes every run), for the large-pull
// figure: bench push-layer -size 1073741824 -ref 127.0.0.1:5000/berth-test/huge:latest.
// The layer is gzip with stored blocks: random data does not compress, and
// this way neither runtime spends time on a deflate that gains nothing.
func pushLayerCommand(args []string) error {
	fs := flag.NewFlagSet("push-layer", flag.ContinueOnError)
	size := fs.Int64("size", 1<<30, "bytes of the layer's one file")
	ref := fs.String("ref", "", "where to push (a plain-HTTP registry)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ref == "" {
		return fmt.Errorf("push-layer: -ref is required")
	}
	r, err := name.ParseReference(*ref, name.Insecure)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return randomLayer(*size), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Cmd = []string{"/huge"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	start := time.Now()
	if err := remote.Write(r, img); err != nil {
		return fmt.Errorf("push %s: %w", r, err)
	}
	log.Printf("pushed %s (%d-byte layer) in %s", r, *size, time.Since(start).Round(time.Millisecond))
	return nil
}

// randomLayer streams a gzip (stored blocks) tar of one file of n seeded
// pseudo-random bytes.
func randomLayer(n int64) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		zw, _ := gzip.NewWriterLevel(pw, gzip.NoCompression)
		tw := tar.NewWriter(zw)
		err := tw.WriteHeader(&tar.Header{Name: "huge", Mode: 0o644, Size: n, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
		if err == nil {
			rng := rand.NewChaCha8([32]byte{'b', 'e', 'r', 't', 'h'})
			_, err = io.CopyN(tw, rng, n)
		}
		if err == nil {
			err = tw.Close()
		}
		if err == nil {
			err = zw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}
