// Package release_test checks the release artifacts hack/release makes for
// amd64: the tarball's entries, the .deb's control data and contents, the
// sums, the binary's --version and, from a clean checkout, that a second
// build of the commit from a git archive elsewhere gives the same bytes.
// A fresh _output/release (built from HEAD of a clean checkout) is used as
// it is; otherwise amd64 is built into a temporary directory.
package release_test

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// artifacts is one build of the amd64 release.
type artifacts struct {
	root, dir, version, commit string
	epoch                      time.Time
	tarball, deb               string // names in dir
}

func TestRelease(t *testing.T) {
	a := release(t)
	t.Run("tarball", func(t *testing.T) { checkTarball(t, a) })
	t.Run("deb", func(t *testing.T) { checkDeb(t, a) })
	t.Run("sums", func(t *testing.T) {
		cmd := exec.Command("sha256sum", "--ignore-missing", "-c", "SHA256SUMS")
		cmd.Dir = a.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sha256sum -c: %v\n%s", err, out)
		}
	})
	t.Run("version", func(t *testing.T) { checkVersion(t, a) })
	t.Run("reproducible", func(t *testing.T) { checkReproducible(t, a) })
}

func git(t *testing.T, root string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// clean says whether the checkout has no change, tracked or not (the
// build outputs are ignored).
func clean(t *testing.T, root string) bool {
	return git(t, root, "status", "--porcelain") == ""
}

func release(t *testing.T) *artifacts {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "hack/release")); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"dpkg-deb", "sha256sum", "gcc", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	head := git(t, root, "rev-parse", "HEAD")
	epoch, err := strconv.ParseInt(git(t, root, "log", "-1", "--format=%ct", "HEAD"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	a := &artifacts{root: root, commit: head, epoch: time.Unix(epoch, 0)}
	a.dir = filepath.Join(root, "_output/release")
	if !clean(t, root) || !findArtifacts(a) || commitOf(t, a) != head {
		a.dir = t.TempDir()
		start := time.Now()
		cmd := exec.Command(filepath.Join(root, "hack/release"), "-arch", "amd64", "-smoke=false", "-out", a.dir)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/release: %v\n%s", err, out)
		}
		t.Logf("built the amd64 release in %s", time.Since(start).Round(time.Second))
		if !findArtifacts(a) {
			t.Fatalf("hack/release left no amd64 tarball and .deb in %s", a.dir)
		}
	}
	return a
}

// findArtifacts takes the amd64 names from dir's SHA256SUMS.
func findArtifacts(a *artifacts) bool {
	sums, err := os.ReadFile(filepath.Join(a.dir, "SHA256SUMS"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(sums), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		switch n := f[1]; {
		case strings.HasSuffix(n, "-linux-amd64.tar.gz"):
			a.tarball = n
			a.version = strings.TrimSuffix(strings.TrimPrefix(n, "berth-"), "-linux-amd64.tar.gz")
		case strings.HasSuffix(n, "_amd64.deb"):
			a.deb = n
		}
	}
	return a.tarball != "" && a.deb != ""
}

// entries reads the tarball: headers in order, and the files' contents.
func entries(t *testing.T, a *artifacts) ([]*tar.Header, map[string][]byte) {
	f, err := os.Open(filepath.Join(a.dir, a.tarball))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || !gz.ModTime.IsZero() {
		t.Errorf("gzip header names %q, time %v: want neither", gz.Name, gz.ModTime)
	}
	var hdrs []*tar.Header
	data := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
		if data[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// commitOf is the commit the tarball's berth says it was built from.
func commitOf(t *testing.T, a *artifacts) string {
	m := regexp.MustCompile(`(?m)^commit (\S+)$`).FindStringSubmatch(versionOf(t, a))
	if m == nil {
		return ""
	}
	return m[1]
}

func versionOf(t *testing.T, a *artifacts) string {
	_, data := entries(t, a)
	bin := filepath.Join(t.TempDir(), "berth")
	if err := os.WriteFile(bin, data[fmt.Sprintf("berth-%s-linux-amd64/berth", a.version)], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("berth --version: %v", err)
	}
	return string(out)
}
