package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// checkReproducible builds the same commit again from a git archive of it
// unpacked in a new temporary directory (another path, no .git, no build
// outputs) and compares the artifacts byte for byte.
func (r *release) checkReproducible() error {
	tmp, err := os.MkdirTemp("", "mkrelease-repro-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", r.root, r.commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %w\n%s", r.commit, err, out)
	}
	again := &release{root: src, out: filepath.Join(tmp, "out"), version: r.version, commit: r.commit,
		epoch: r.epoch, arches: r.arches}
	fmt.Printf("reproducible: building %s again in %s\n", r.commit, src)
	if err := again.run(false, false); err != nil {
		return fmt.Errorf("second build: %w", err)
	}
	first, err := os.ReadFile(filepath.Join(r.out, "SHA256SUMS"))
	if err != nil {
		return err
	}
	second, err := os.ReadFile(filepath.Join(again.out, "SHA256SUMS"))
	if err != nil {
		return err
	}
	if !bytes.Equal(first, second) {
		return fmt.Errorf("not reproducible: the build from %s differs:\n%s\n%s", src, first, second)
	}
	fmt.Printf("reproducible: %d artifacts, same bytes from %s and %s\n",
		strings.Count(string(first), "\n"), r.root, src)
	return nil
}
