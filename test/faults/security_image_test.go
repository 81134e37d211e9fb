package faults_test

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestSecurityHostileImageLayers pulls, through the CRI and from the
// test registry, images whose second layer tries to write outside its
// layer directory: `..` names, absolute names, symlinks (absolute and
// climbing) written through, hard links to host files, whiteouts of `..`
// and through symlinks. Each pull must fail or neutralise the entries;
// either way nothing outside the layer changes (victims beside the image
// store, in a dir of their own, and /etc/shadow), and a failed pull
// leaves no image and no layer behind.
func TestSecurityHostileImageLayers(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.TestRegistry(t)
	d := framework.StartDaemon(t)
	victims := framework.TempDir(t)
	for _, p := range []string{filepath.Join(victims, "victim"), filepath.Join(d.Root, "victim"), filepath.Join(d.Dir, "victim")} {
		if err := os.WriteFile(p, []byte("victim"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(victims, "dir", "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Enough `..` to reach / from any depth the layer root may be at.
	up := strings.Repeat("../", 24)
	abs := strings.TrimPrefix(victims, "/")
	// One hostile entry per image, last in its layer (what comes before
	// sets it up), so that each is tried: the unpacker stops at the first.
	link := secTarSymlink("link", victims)
	cases := []struct {
		name         string
		lower, upper []secTarEntry
	}{
		{"dotdot", nil, []secTarEntry{secTarFile("../escaped", "x")}},
		{"dotdot twice", nil, []secTarEntry{secTarFile("../../escaped", "x")}},
		{"dotdot inside", nil, []secTarEntry{secTarFile("a/../../../escaped", "x")}},
		{"dotdot to victims", nil, []secTarEntry{secTarFile(up+abs+"/escaped", "x")}},
		{"absolute file", nil, []secTarEntry{secTarFile(victims+"/escaped", "x")}},
		{"absolute dir", nil, []secTarEntry{secTarDir(victims + "/escaped-dir")}},
		{"absolute link new file", nil, []secTarEntry{link, secTarFile("link/escaped", "x")}},
		{"absolute link overwrite", nil, []secTarEntry{link, secTarFile("link/victim", "pwned")}},
		{"absolute link dir", nil, []secTarEntry{link, secTarDir("link/dir/keep/escaped-dir")}},
		{"climbing link", nil, []secTarEntry{secTarDir("a"), secTarSymlink("a/up", up+abs), secTarFile("a/up/escaped", "x")}},
		{"link chain", nil, []secTarEntry{secTarSymlink("l1", "l2"), secTarSymlink("l2", up+abs), secTarFile("l1/escaped", "x")}},
		{"file replaced by link", nil, []secTarEntry{secTarFile("x", "x"), secTarSymlink("x", victims), secTarFile("x/escaped", "x")}},
		{"link in the lower layer", []secTarEntry{link}, []secTarEntry{secTarFile("link/escaped", "x"), secTarFile("link/victim", "pwned")}},
		{"hard link to /etc/shadow", nil, []secTarEntry{secTarHardlink("shadow", "/etc/shadow")}},
		{"hard link climbing to shadow", nil, []secTarEntry{secTarHardlink("shadow", up+"etc/shadow")}},
		{"hard link to a victim", nil, []secTarEntry{secTarHardlink("v", victims+"/victim")}},
		{"hard link climbing to a victim", nil, []secTarEntry{secTarHardlink("v", up+abs+"/victim")}},
		{"hard link through a link", nil, []secTarEntry{link, secTarHardlink("v", "link/victim")}},
		{"whiteout of dotdot", nil, []secTarEntry{secTarFile(".wh..", "")}},
		{"whiteout of dotdot inside", nil, []secTarEntry{secTarDir("a"), secTarFile("a/.wh..", "")}},
		{"whiteout beside", nil, []secTarEntry{secTarFile("../.wh.victim", "")}},
		{"whiteout climbing", nil, []secTarEntry{secTarFile("a/../../.wh.victim", "")}},
		{"whiteout of victims", nil, []secTarEntry{secTarFile(up+abs+"/.wh.victim", "")}},
		{"whiteout through a link", nil, []secTarEntry{link, secTarFile("link/.wh.victim", "")}},
		{"opaque through a link", nil, []secTarEntry{secTarSymlink("link", victims+"/dir"), secTarFile("link/.wh..wh..opq", "")}},
	}
	watched := []string{victims, d.Dir}
	before := secSnapshot(t, watched...)
	shadowBefore := secSnapshot(t, "/etc/shadow")
	layersBefore := secDirNames(filepath.Join(d.Root, "image", "layers"))

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref := fmt.Sprintf("%s/berth-test-hostile/%s:%s", reg, secRepoName(c.name), framework.RandHex(4))
			lower := append([]secTarEntry{secTarFile("ok", "ok")}, c.lower...)
			secPushImage(t, ref, nil, secTarLayer(t, lower...), secTarLayer(t, c.upper...))
			_, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			if err != nil {
				t.Logf("refused: %v", err)
				st, serr := d.Image.ImageStatus(framework.Ctx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
				if serr != nil || st.GetImage() != nil {
					t.Errorf("after a failed pull: image %v, %v", st.GetImage(), serr)
				}
			} else {
				t.Logf("accepted: the entries were neutralised")
				if _, err := d.Image.RemoveImage(framework.Ctx(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
					t.Errorf("remove %s: %v", ref, err)
				}
			}
			secAssertSame(t, before, secSnapshot(t, watched...), "beside the layer")
			secAssertSame(t, shadowBefore, secSnapshot(t, "/etc/shadow"), "host file")
			if after := secDirNames(filepath.Join(d.Root, "image", "layers")); !slices.Equal(after, layersBefore) {
				t.Errorf("layer dirs %v, before the pull %v", after, layersBefore)
			}
		})
	}
	if _, err := d.Runtime.Version(framework.Ctx(t), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("berth after the hostile pulls: %v", err)
	}
}

// snapshot describes every file under the roots by path: type, mode,
// link count, size, and a hash of the content or the symlink target.
// berth's own log and the image store's blobs, records and layers change
// on every pull and are left out; the layers are checked apart.
func secSnapshot(t *testing.T, roots ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				out[p] = "error: " + err.Error()
				return nil
			}
			if de.IsDir() && slices.Contains([]string{"content", "images", "layers", "layer-records", "leases"}, de.Name()) &&
				filepath.Base(filepath.Dir(p)) == "image" {
				return filepath.SkipDir
			}
			if de.Name() == "berth.log" {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				out[p] = "error: " + err.Error()
				return nil
			}
			st := fi.Sys().(*syscall.Stat_t)
			desc := fmt.Sprintf("%s nlink %d size %d", fi.Mode(), st.Nlink, fi.Size())
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				desc += " -> " + target
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(p)
				desc += fmt.Sprintf(" sha256 %x", sha256.Sum256(b))
			}
			out[p] = desc
			return nil
		})
	}
	return out
}

func secAssertSame(t *testing.T, before, after map[string]string, where string) {
	t.Helper()
	for p, a := range after {
		if b, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared: %s", where, p, a)
		} else if a != b {
			t.Errorf("%s: %s changed: %s, was %s", where, p, a, b)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s: %s disappeared", where, p)
		}
	}
}

func secDirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// secRepoName makes a case's name a repository path component.
func secRepoName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}
