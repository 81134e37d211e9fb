package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
)

// entry is one file of an artifact.
type entry struct {
	name string
	mode int64
	data []byte
}

// contents is what both the tarball and the package hold, in the tarball's
// names; unitDir is where the unit expects the binaries.
func (r *release) contents(bin, unitDir string) ([]entry, error) {
	var es []entry
	for _, b := range binaries {
		data, err := os.ReadFile(filepath.Join(bin, b))
		if err != nil {
			return nil, err
		}
		es = append(es, entry{b, 0o755, data})
	}
	cfg, err := r.defaultConfig()
	if err != nil {
		return nil, err
	}
	es = append(es,
		entry{"berth.service", 0o644, []byte(unit(unitDir))},
		entry{"config.toml", 0o644, []byte(cfg)},
		entry{"crictl.yaml", 0o644, []byte(crictlYAML)})
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	return es, nil
}

// tarball writes berth-<version>-linux-<arch>.tar.gz: one directory of the
// same name, entries sorted, owned by root, every mtime the commit's; gzip
// with no name and no time.
func (r *release) tarball(arch, bin string) (string, error) {
	base := fmt.Sprintf("berth-%s-linux-%s", r.version, arch)
	es, err := r.contents(bin, "/usr/local/bin")
	if err != nil {
		return "", err
	}
	data, err := targz(base, es, r.epoch)
	if err != nil {
		return "", err
	}
	name := base + ".tar.gz"
	return name, os.WriteFile(filepath.Join(r.out, name), data, 0o644)
}

// targz is the tarball of es under the directory base: entries in es's
// order, owned by root, every mtime epoch; gzip with no name and no time.
func targz(base string, es []entry, epoch time.Time) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	hdr := func(name string, mode int64, typ byte, size int64) *tar.Header {
		return &tar.Header{Name: name, Mode: mode, Typeflag: typ, Size: size, ModTime: epoch,
			Uname: "root", Gname: "root", Format: tar.FormatPAX}
	}
	if err := tw.WriteHeader(hdr(base+"/", 0o755, tar.TypeDir, 0)); err != nil {
		return nil, err
	}
	for _, e := range es {
		if err := tw.WriteHeader(hdr(base+"/"+e.name, e.mode, tar.TypeReg, int64(len(e.data)))); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// debPaths is where the package installs each file of contents.
var debPaths = map[string]string{
	"berth.service": "/usr/lib/systemd/system/berth.service",
	"config.toml":   "/etc/berth/config.toml",
	"crictl.yaml":   "/etc/crictl.yaml",
}

// deb writes berth_<version>_<arch>.deb with nfpm: the binaries in /usr/bin,
// the unit, and the config files as conffiles (kept on upgrade and remove,
// gone on purge).
func (r *release) deb(arch, bin string) (string, error) {
	es, err := r.contents(bin, "/usr/bin")
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "mkrelease-deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	var cs files.Contents
	for _, e := range es {
		src := filepath.Join(tmp, e.name)
		if err := os.WriteFile(src, e.data, os.FileMode(e.mode)); err != nil {
			return "", err
		}
		dst, typ := "/usr/bin/"+e.name, ""
		if p, ok := debPaths[e.name]; ok {
			dst = p
			if strings.HasPrefix(p, "/etc/") {
				typ = files.TypeConfigNoReplace
			}
		}
		cs = append(cs, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Mode: os.FileMode(e.mode), MTime: r.epoch, Owner: "root", Group: "root"}})
	}
	scripts := map[string]string{"postinst": postinst, "prerm": prerm, "postrm": postrm}
	for n, s := range scripts {
		if err := os.WriteFile(filepath.Join(tmp, n), []byte(s), 0o755); err != nil {
			return "", err
		}
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name: "berth", Arch: arch, Platform: "linux", Version: strings.TrimPrefix(r.version, "v"),
		Section: "admin", Priority: "optional", Maintainer: "berth developers <berth@localhost>",
		Description: "berth container runtime: a Kubernetes CRI runtime (in place of containerd)",
		Homepage:    "https://github.com/berth-runtime/berth", License: "Apache-2.0", MTime: r.epoch,
		Overridables: nfpm.Overridables{
			// glibc of Debian 12 and Ubuntu 22.04 (the binaries need
			// GLIBC_2.34), libseccomp for berth-spawn's filters.
			Depends:    []string{"libc6 (>= 2.34)", "libseccomp2", "iptables", "mount"},
			Recommends: []string{"containernetworking-plugins"},
			Contents:   cs,
			Scripts: nfpm.Scripts{PostInstall: filepath.Join(tmp, "postinst"),
				PreRemove: filepath.Join(tmp, "prerm"), PostRemove: filepath.Join(tmp, "postrm")},
		},
	})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", err
	}
	pkg, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}
	name := pkg.ConventionalFileName(info)
	f, err := os.Create(filepath.Join(r.out, name))
	if err != nil {
		return "", err
	}
	if err := pkg.Package(info, f); err != nil {
		f.Close()
		return "", err
	}
	return name, f.Close()
}

// sums writes SHA256SUMS in sha256sum -c's format.
func (r *release) sums(names []string) error {
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(r.out, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  %s\n", sha256.Sum256(data), n)
	}
	return os.WriteFile(filepath.Join(r.out, "SHA256SUMS"), []byte(b.String()), 0o644)
}
