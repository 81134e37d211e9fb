package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// crossCC is the C compiler of each GOARCH built on amd64: cgo (libcontainer's
// nsenter and libseccomp) and the C pod process need it.
var crossCC = map[string]string{"amd64": "gcc", "arm64": "aarch64-linux-gnu-gcc"}

// podCC builds the C pod process: musl where Debian has it for the
// architecture (musl-tools), else the cross compiler's static glibc.
var podCC = map[string]string{"amd64": "musl-gcc", "arm64": "aarch64-linux-gnu-gcc"}

// build compiles the binaries of arch into dir as hack/build does, with
// nothing of the building machine in them: -trimpath, no build id, no VCS
// stamp (the commit is given with -X).
func (r *release) build(arch, dir string) error {
	cc, ok := crossCC[arch]
	if !ok {
		return fmt.Errorf("no C compiler known for %s", arch)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	const pkg = "github.com/berth-runtime/berth/internal/version"
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s.Version=%s -X %s.Commit=%s", pkg, r.version, pkg, r.commit)
	env := []string{"GOOS=linux", "GOARCH=" + arch, "CC=" + cc, "GOFLAGS=-buildvcs=false -trimpath",
		"SOURCE_DATE_EPOCH=" + strconv.FormatInt(r.epoch.Unix(), 10)}
	steps := [][]string{
		{"CGO_ENABLED=1", "go", "build", "-tags", "seccomp", "-ldflags", ldflags, "-o", dir + "/", "./cmd/..."},
		// The monitor is static Go without cgo, as hack/build makes it.
		{"CGO_ENABLED=0", "go", "build", "-ldflags", ldflags, "-o", dir + "/", "./cmd/berth-monitor"},
		// The C pod process: static, libc only; CFLAGS as the Makefile's
		// with the build directory kept out of the binary.
		{"", "make", "-s", "-B", "-C", "monitor/podproc/csrc", "CC=" + cc, "PODCC=" + podCC[arch], "OUT=" + dir,
			"CFLAGS=-Os -ffile-prefix-map=" + r.root + "=.", filepath.Join(dir, "berth-podproc")},
	}
	for _, s := range steps {
		cmd := exec.Command(s[1], s[2:]...)
		cmd.Dir = r.root
		cmd.Env = append(os.Environ(), env...)
		if s[0] != "" {
			cmd.Env = append(cmd.Env, s[0])
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%v: %w", s[1:], err)
		}
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return err
		}
	}
	return nil
}

// defaultConfig is berth config default from the host's own build: the
// config does not depend on the architecture.
func (r *release) defaultConfig() (string, error) {
	cmd := exec.Command("go", "run", "./cmd/berth", "config", "default")
	cmd.Dir = r.root
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("berth config default: %w", err)
	}
	return shippedConfig(string(out))
}
