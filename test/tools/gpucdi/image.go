package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-runtime/berth/internal/dockerarchive"
)

// writeImage writes a `docker save` archive (which `ctr images import`,
// berth-ctr's too, reads) of the image tag made of the one layer tar,
// with sh as its command: the device machine reaches no registry, so
// the image travels as a file.
func writeImage(layer, tag, out string) error {
	diffID, err := fileSHA256(layer)
	if err != nil {
		return err
	}
	config, err := json.Marshal(v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: time.Now().UTC().Truncate(time.Second)},
		Config: v1.Config{
			Cmd: []string{"sh"},
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{{Algorithm: "sha256", Hex: diffID}}},
	})
	if err != nil {
		return err
	}
	if err := writeAside(out, func(f *os.File) error {
		return dockerarchive.Write(f, tag, config, []string{layer})
	}); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
