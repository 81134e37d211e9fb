package kind

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-runtime/berth/bench/report"
	"github.com/berth-runtime/berth/internal/dockerarchive"
)

// runArchive is `bench kind archive -images FILE -name NAME -tag REF`: it
// writes the OCI image layout test/images/mkimage's current.json lists under NAME,
// a single image, to stdout as a docker-archive (manifest.json,
// the config, one layer.tar per layer, compressed as in the layout), which
// Docker 20.10's `docker load` reads (it reads no OCI layouts). This is how
// test/images/mkimage's 100 MB test image gets into Docker for `kind load`.
func runArchive(args []string) error {
	fs := flag.NewFlagSet("bench kind archive", flag.ContinueOnError)
	current := fs.String("images", "", "test/images/mkimage's current.json (required)")
	name := fs.String("name", "big", "the image's name in it")
	tag := fs.String("tag", "", "the image's name in Docker (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *current == "" || *tag == "" {
		return errors.New("-images and -tag are required")
	}
	var images []struct{ Name, Layout string }
	if err := report.ReadJSON(*current, &images); err != nil {
		return err
	}
	var layout *string
	for _, im := range images {
		if im.Name == *name {
			layout = &im.Layout
		}
	}
	if layout == nil {
		return fmt.Errorf("%s lists no image %q", *current, *name)
	}
	blob := func(digest string) string {
		return filepath.Join(*layout, "blobs", strings.Replace(digest, ":", "/", 1))
	}
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	if err := report.ReadJSON(filepath.Join(*layout, "index.json"), &index); err != nil {
		return err
	}
	if len(index.Manifests) != 1 {
		return fmt.Errorf("%s: want one manifest in index.json, found %d", *layout, len(index.Manifests))
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := report.ReadJSON(blob(index.Manifests[0].Digest), &manifest); err != nil {
		return err
	}
	config, err := os.ReadFile(blob(manifest.Config.Digest))
	if err != nil {
		return err
	}
	var layers []string
	for _, l := range manifest.Layers {
		layers = append(layers, blob(l.Digest))
	}
	return dockerarchive.Write(os.Stdout, *tag, config, layers)
}
