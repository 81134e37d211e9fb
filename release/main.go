// Command mkrelease builds berth's release artifacts (hack/release runs it):
// per architecture a tarball and a .deb of the binaries, the systemd unit,
// the shipped config.toml and a crictl.yaml, then SHA256SUMS. Every byte is
// a function of the commit: the same commit built anywhere gives the same
// files. It is a module of its own so that nfpm stays out of berth's go.mod.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// release names what is built and where.
type release struct {
	root    string // berth's source tree
	out     string // artifacts
	version string
	commit  string
	epoch   time.Time // SOURCE_DATE_EPOCH: every mtime in every artifact
	arches  []string
}

// binaries is the set every tarball and package holds.
var binaries = []string{"berth", "berth-ctr", "berth-monitor", "berth-pause", "berth-podproc", "berth-spawn"}

func main() {
	root := flag.String("root", "", "berth's source tree (required)")
	out := flag.String("out", "", "output directory (default <root>/_output/release)")
	version := flag.String("version", "", "version (required)")
	commit := flag.String("commit", "", "full commit sha (required)")
	epoch := flag.Int64("source-date-epoch", -1, "commit time, seconds since the epoch (required)")
	arches := flag.String("arch", "amd64,arm64", "comma-separated GOARCHes")
	smoke := flag.Bool("smoke", true, "run the arm64 binaries under qemu-user")
	repro := flag.Bool("check-reproducible", false, "build again from a git archive of the commit elsewhere and compare bytes")
	flag.Parse()
	if *root == "" || *version == "" || *commit == "" || *epoch < 0 {
		fmt.Fprintln(os.Stderr, "mkrelease: -root, -version, -commit and -source-date-epoch are required")
		os.Exit(2)
	}
	r := &release{root: *root, out: *out, version: *version, commit: *commit,
		epoch: time.Unix(*epoch, 0).UTC(), arches: strings.Split(*arches, ",")}
	if r.out == "" {
		r.out = filepath.Join(r.root, "_output", "release")
	}
	if err := r.run(*smoke, *repro); err != nil {
		fmt.Fprintf(os.Stderr, "mkrelease: %v\n", err)
		os.Exit(1)
	}
}

func (r *release) run(smoke, repro bool) error {
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		return err
	}
	var names []string
	for _, arch := range r.arches {
		bin := filepath.Join(r.out, "build", arch)
		if err := r.build(arch, bin); err != nil {
			return fmt.Errorf("build %s: %w", arch, err)
		}
		tgz, err := r.tarball(arch, bin)
		if err != nil {
			return fmt.Errorf("tarball %s: %w", arch, err)
		}
		deb, err := r.deb(arch, bin)
		if err != nil {
			return fmt.Errorf("deb %s: %w", arch, err)
		}
		names = append(names, tgz, deb)
		if arch == "arm64" && smoke {
			if err := r.smoke(bin); err != nil {
				return fmt.Errorf("smoke arm64: %w", err)
			}
		}
	}
	if err := r.sums(names); err != nil {
		return err
	}
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(r.out, n))
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%d bytes\n", n, fi.Size())
	}
	if repro {
		return r.checkReproducible()
	}
	return nil
}
