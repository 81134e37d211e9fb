package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// EnvCache is the cache hack/env.sh exports; binaries built from other
// commits are kept there.
const EnvCache = "BERTH_CACHE"

// WithBinary starts the daemon from bin (a berth with its berth-monitor
// and berth-pause beside it) instead of the binary under test.
func WithBinary(bin string) Option { return func(o *options) { o.binary = bin } }

// SetBinary makes the daemon's next start run bin; "" is the binary under
// test. An upgrade test swaps binaries under running pods this way.
func (d *Daemon) SetBinary(bin string) { d.binary = bin }

// Git runs git in the module's checkout and returns its trimmed output.
func Git(t testing.TB, args ...string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("git %s: %v %s", strings.Join(args, " "), err, msg)
	}
	return strings.TrimSpace(string(out))
}

// BuildCommit returns the berth binary of commit (with its monitor and
// pause beside it), built once from that commit's tree by its hack/build
// and kept in $BERTH_CACHE/berth-at/<full hash>: an upgrade test runs what
// the commit before shipped.
func BuildCommit(t testing.TB, commit string) string {
	t.Helper()
	sha := Git(t, "rev-parse", "--verify", commit+"^{commit}")
	cache := os.Getenv(EnvCache)
	if cache == "" {
		cache = "/var/cache/berth-dev"
	}
	dir := filepath.Join(cache, "berth-at", sha)
	bin := filepath.Join(dir, "berth")
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return bin
	}
	src, err := os.MkdirTemp("", "berth-at-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The commit's tree alone (no work tree of the repository's to add
	// and remove).
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, sha, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("extract commit %s: %v\n%s", sha, err, out)
	}
	// Built as that commit builds itself (its own hack/build: which
	// binaries, with which flags).
	build := exec.Command("hack/build")
	build.Dir = src
	build.Env = append(os.Environ(), "BERTH_OUTPUT="+filepath.Join(src, "_output"), "BERTH_BINARY=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build berth of commit %s: %v\n%s", sha, err, out)
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(src, "_output", "bin"), tmp); err != nil {
		// Another file system: copy.
		if out, err := exec.Command("cp", "-a", filepath.Join(src, "_output", "bin"), tmp).CombinedOutput(); err != nil {
			t.Fatalf("keep the build of %s: %v %s", sha, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(sha+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(fmt.Errorf("keep the build of %s: %w", sha, err))
	}
	return bin
}
