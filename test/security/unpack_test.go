package security_test

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// layerCase is an image of lower and upper layers to pull.
type layerCase struct {
	name         string
	lower, upper []entry
}

// pullHostile pulls each case's image and checks that nothing outside
// the layer store changed: the victim dir (content, modes, owners,
// times, xattrs), /etc/shadow's metadata, and that a refused pull left
// no image and no layer behind.
func (e *env) pullHostile(t *testing.T, victim *victimDir, cases []layerCase) {
	t.Helper()
	shadow := describe("/etc/shadow")
	layersDir := filepath.Join(e.D.Root, "image", "layers")
	entries := func() []string {
		des, _ := os.ReadDir(layersDir)
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		return names
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := entries()
			var layers []v1.Layer
			if c.lower != nil {
				layers = append(layers, layer(t, c.lower...))
			}
			layers = append(layers, layer(t, append([]entry{file("ok", "ok")}, c.upper...)...))
			ref := e.push("unpack", image(t, nil, nil, layers...))
			if err := e.pull(ref); err != nil {
				t.Logf("refused: %v", err)
				if st, err := e.D.Image.ImageStatus(framework.Ctx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil || st.GetImage() != nil {
					t.Errorf("after a refused pull: image %v, %v", st.GetImage(), err)
				}
				if after := entries(); !slices.Equal(after, before) {
					t.Errorf("layers %v after a refused pull, %v before", after, before)
				}
			} else {
				t.Logf("accepted: the entries stayed in the layer")
				e.D.Image.RemoveImage(framework.Ctx(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			}
			victim.check(t)
			if got := describe("/etc/shadow"); got != shadow {
				t.Errorf("/etc/shadow is %s, was %s", got, shadow)
			}
		})
	}
}

// withMeta is e with a mode, owner and time of its own: what a metadata
// change through a link would put on the victim.
func withMeta(e entry) entry {
	e.mode, e.uid, e.gid = 0o6777, 4242, 4242
	e.xattrs = map[string]string{"user.pwned": "yes"}
	return e
}

// TestContainerd_CVE_2021_32760_UnpackMetadataThroughLinks: containerd
// applied an entry's mode (and owner, times) to what a symlink of the
// layer pointed at, so an image could chmod host files. Entries that
// restate a symlink's name as a file or directory with setuid modes,
// other owners, times and xattrs, in the same layer or the next, and
// through hard links to symlinks, must change the layer only.
func TestContainerd_CVE_2021_32760_UnpackMetadataThroughLinks(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	v := victim.Dir + "/victim"
	e.pullHostile(t, victim, []layerCase{
		{"file over a link, next layer", []entry{symlink("l", v)}, []entry{withMeta(file("l", "x"))}},
		{"dir over a link, next layer", []entry{symlink("d", victim.Dir)}, []entry{withMeta(dir("d"))}},
		{"file over a link, same layer", nil, []entry{symlink("l", v), withMeta(file("l", "x"))}},
		{"dir over a link to a dir, same layer", nil, []entry{symlink("d", victim.Dir), withMeta(dir("d"))}},
		{"dir with a slash over a link", nil, []entry{symlink("d", victim.Dir), withMeta(dir("d/"))}},
		{"hard link to a link, restated", nil, []entry{symlink("l", v), hardlink("h", "l"), withMeta(file("h", "x"))}},
		{"hard link to a link, chmod by a dir", nil, []entry{symlink("l", victim.Dir), hardlink("h", "l"), withMeta(dir("h"))}},
		{"metadata through a link's dir", nil, []entry{symlink("d", victim.Dir), withMeta(dir("d/sub"))}},
		{"climbing link, restated", nil, []entry{symlink("l", up+rel(v)), withMeta(file("l", "x"))}},
		{"device over a link", nil, []entry{symlink("l", v), withMeta(entry{name: "l", typ: tar.TypeChar, devmajor: 1, devminor: 3})}},
		{"fifo through a link's dir", nil, []entry{symlink("d", victim.Dir), withMeta(entry{name: "d/fifo", typ: tar.TypeFifo})}},
	})
}

// TestContainerd_CVE_2025_47290_UnpackTOCTOU: containerd 2.1.0 checked
// an entry's path and then wrote it by name, so an earlier entry of the
// same layer could have swapped a directory on the way for a symlink.
// Reduced to the property of the fix: every entry is resolved beneath
// the layer at the moment it is written, whatever the entries before it
// replaced (a directory by a symlink, a symlink by a directory, a
// whiteout of a parent) and whatever berth cached of the parent.
func TestContainerd_CVE_2025_47290_UnpackTOCTOU(t *testing.T) {
	e := newEnv(t)
	victim := newVictim(t)
	e.pullHostile(t, victim, []layerCase{
		{"dir swapped for a link", nil, []entry{dir("a"), file("a/f1", "x"), symlink("a", victim.Dir), file("a/f2", "pwned"), file("a/victim", "pwned")}},
		{"dir swapped for a climbing link", nil, []entry{dir("a"), dir("a/b"), file("a/b/f1", "x"), symlink("a", up+rel(victim.Dir)), file("a/b/../victim", "pwned"), file("a/sub/victim", "pwned")}},
		{"parent swapped twice", nil, []entry{dir("a"), file("a/f", "x"), symlink("a", "b"), dir("b"), symlink("b", victim.Dir), file("a/victim", "pwned")}},
		{"whiteout of a parent then a link", []entry{dir("a"), file("a/f", "x")}, []entry{file(".wh.a", ""), symlink("a", victim.Dir), file("a/victim", "pwned")}},
		{"opaque dir then a link", []entry{dir("a")}, []entry{dir("a"), file("a/.wh..wh..opq", ""), symlink("a", victim.Dir), file("a/victim", "pwned")}},
		{"hard link after a swap", nil, []entry{dir("a"), symlink("a", victim.Dir), hardlink("h", "a/victim")}},
		{"link swapped for a dir", nil, []entry{symlink("a", victim.Dir), dir("a"), file("a/f", "x"), symlink("a", victim.Dir), file("a/victim", "pwned")}},
	})
}

// TestContainerd_UnpackSuperlinear (containerd GHSA-rp3h-jf77-q9p4): a
// layer whose entries made containerd's unpack walk directories again
// and again took superlinear time, holding a pull (and the kubelet)
// for as long as the image liked. A layer of deep directories, its
// entries alternating between two of the deepest, must unpack within a
// small multiple of a flat layer of as many entries.
func TestContainerd_UnpackSuperlinear(t *testing.T) {
	e := newEnv(t)
	const n, depth = 4000, 400
	deep := func(branch string) string { return branch + strings.Repeat("/d", depth-1) }
	var flat, nested []entry
	nested = append(nested, dir("a"), dir("b"))
	for i := range n {
		flat = append(flat, file(fmt.Sprintf("f%d", i), "x"))
		nested = append(nested, file(fmt.Sprintf("%s/f%d", deep([]string{"a", "b"}[i%2]), i), "x"))
	}
	timePull := func(entries []entry) time.Duration {
		ref := e.push("superlinear", image(t, nil, nil, layer(t, entries...)))
		start := time.Now()
		if err := e.pull(ref); err != nil {
			t.Logf("pull: %v", err)
		}
		took := time.Since(start)
		e.D.Image.RemoveImage(framework.Ctx(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		return took
	}
	tFlat, tNested := timePull(flat), timePull(nested)
	t.Logf("%d entries: flat %s, alternating %d deep %s", n, tFlat.Round(time.Millisecond), depth, tNested.Round(time.Millisecond))
	if tNested > 10*tFlat+5*time.Second {
		t.Errorf("the deep layer took %s, the flat one %s", tNested, tFlat)
	}
}
