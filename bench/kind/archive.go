package kind

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-runtime/berth/bench/report"
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
	hexOf := func(d string) string { return strings.TrimPrefix(d, "sha256:") }
	entry := struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{Config: hexOf(manifest.Config.Digest) + ".json", RepoTags: []string{*tag}}
	files := [][2]string{{entry.Config, blob(manifest.Config.Digest)}}
	for _, l := range manifest.Layers {
		name := hexOf(l.Digest) + "/layer.tar"
		entry.Layers = append(entry.Layers, name)
		files = append(files, [2]string{name, blob(l.Digest)})
	}
	tw := tar.NewWriter(os.Stdout)
	for _, f := range files {
		if err := addFile(tw, f[0], f[1]); err != nil {
			return err
		}
	}
	data, err := json.Marshal([]any{entry})
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, name, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
