package image

import (
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestHostPlatform(t *testing.T) {
	tests := []struct {
		goos, goarch, cpuinfo, goarm string
		want                         string
	}{
		{goos: "linux", goarch: "amd64", want: "linux/amd64"},
		{goos: "linux", goarch: "arm64", want: "linux/arm64/v8"},
		{goos: "linux", goarch: "s390x", want: "linux/s390x"},
		// 32-bit arm: the CPU says what it runs, whatever berth was built for.
		{goos: "linux", goarch: "arm", cpuinfo: "processor\t: 0\nmodel name\t: ARMv7 Processor rev 4 (v7l)\nCPU architecture: 7\nCPU variant\t: 0x0\n", goarm: "6", want: "linux/arm/v7"},
		{goos: "linux", goarch: "arm", cpuinfo: "CPU architecture: 8\n", goarm: "7", want: "linux/arm/v8"},
		{goos: "linux", goarch: "arm", cpuinfo: "CPU architecture:\t5TEJ\n", want: "linux/arm/v5"},
		{goos: "linux", goarch: "arm", cpuinfo: "CPU architecture: 6TEJ\n", want: "linux/arm/v6"},
		// No /proc/cpuinfo line: the GOARM berth was built with.
		{goos: "linux", goarch: "arm", goarm: "6,softfloat", want: "linux/arm/v6"},
		{goos: "linux", goarch: "arm", cpuinfo: "Hardware\t: BCM2835\n", goarm: "5", want: "linux/arm/v5"},
		{goos: "linux", goarch: "arm", want: "linux/arm/v7"},
	}
	for _, tt := range tests {
		if got := platformString(hostPlatform(tt.goos, tt.goarch, []byte(tt.cpuinfo), tt.goarm)); got != tt.want {
			t.Errorf("hostPlatform(%s, %s, %q, %q) = %s, want %s", tt.goos, tt.goarch, tt.cpuinfo, tt.goarm, got, tt.want)
		}
	}
	p := HostPlatform()
	if p.OS != runtime.GOOS || p.Architecture != runtime.GOARCH || (runtime.GOARCH == "arm64" && p.Variant != "v8") {
		t.Errorf("HostPlatform() = %s on %s/%s", platformString(p), runtime.GOOS, runtime.GOARCH)
	}
}

func plat(s string) *v1.Platform {
	p, err := v1.ParsePlatform(s)
	if err != nil {
		panic(err)
	}
	return p
}

func TestChoosePlatform(t *testing.T) {
	img := func(p string) v1.Descriptor {
		d := v1.Descriptor{MediaType: types.OCIManifestSchema1}
		if p != "" {
			d.Platform = plat(p)
		}
		return d
	}
	attestation := v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}}
	nested := v1.Descriptor{MediaType: types.OCIImageIndex, Platform: plat("linux/arm64")}
	tests := []struct {
		name      string
		host      string
		manifests []v1.Descriptor
		want      int    // index of the manifest chosen, -1 for an error
		errHas    string // what the error must say
	}{
		{name: "the host's, listed second", host: "linux/amd64", manifests: []v1.Descriptor{img("linux/arm64/v8"), img("linux/amd64")}, want: 1},
		{name: "arm64 without a variant is v8", host: "linux/arm64/v8", manifests: []v1.Descriptor{img("linux/amd64"), img("linux/arm64")}, want: 1},
		{name: "arm64 host, index spells the variant", host: "linux/arm64", manifests: []v1.Descriptor{img("linux/amd64"), img("linux/arm64/v8")}, want: 1},
		{name: "a v7 CPU prefers v7", host: "linux/arm/v7", manifests: []v1.Descriptor{img("linux/arm/v6"), img("linux/arm/v7")}, want: 1},
		{name: "a v7 CPU runs v6", host: "linux/arm/v7", manifests: []v1.Descriptor{img("linux/amd64"), img("linux/arm/v5"), img("linux/arm/v6")}, want: 2},
		{name: "arm without a variant is v7", host: "linux/arm/v7", manifests: []v1.Descriptor{img("linux/arm64"), img("linux/arm")}, want: 1},
		{name: "first of equals", host: "linux/amd64", manifests: []v1.Descriptor{img("linux/amd64"), img("linux/amd64")}, want: 0},
		{name: "no platform is linux/amd64", host: "linux/amd64", manifests: []v1.Descriptor{img("linux/arm64"), img("")}, want: 1},
		{name: "uname spelling", host: "linux/amd64", manifests: []v1.Descriptor{img("linux/x86_64")}, want: 0},
		{name: "amd64/v1 is amd64", host: "linux/amd64", manifests: []v1.Descriptor{img("linux/amd64/v1")}, want: 0},
		{name: "attestations and nested indexes are no images", host: "linux/arm64/v8", manifests: []v1.Descriptor{attestation, nested, img("linux/arm64")}, want: 2},
		{name: "a v6 CPU does not run v7", host: "linux/arm/v6", manifests: []v1.Descriptor{img("linux/arm/v7"), img("linux/amd64")}, want: -1, errHas: "no image for linux/arm/v6 in the index (it has linux/arm/v7, linux/amd64)"},
		{name: "an arm64 host does not take 32-bit arm", host: "linux/arm64", manifests: []v1.Descriptor{img("linux/arm/v7")}, want: -1, errHas: "linux/arm64/v8"},
		{name: "amd64 micro-architecture levels are not guessed", host: "linux/amd64", manifests: []v1.Descriptor{img("linux/amd64/v3")}, want: -1, errHas: "linux/amd64/v3"},
		{name: "another OS", host: "linux/amd64", manifests: []v1.Descriptor{img("windows/amd64")}, want: -1, errHas: "windows/amd64"},
		{name: "nothing", host: "linux/amd64", manifests: []v1.Descriptor{attestation}, want: -1, errHas: "it has unknown/unknown"},
	}
	for _, tt := range tests {
		for i := range tt.manifests {
			tt.manifests[i].Size = int64(i) // tells equal descriptors apart
		}
		got, err := choosePlatform(*plat(tt.host), tt.manifests)
		switch {
		case tt.want < 0:
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("%s: %v, %v; want an error saying %q", tt.name, got.Platform, err, tt.errHas)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case got.Size != int64(tt.want):
			t.Errorf("%s: chose manifest %d (%v), want %d", tt.name, got.Size, got.Platform, tt.want)
		}
	}
}

// platformVariantImage is an image for p whose one file names p, so that
// each platform's image has its own config digest.
func platformVariantImage(t testing.TB, p string) v1.Image {
	t.Helper()
	img := buildImage(t, "", gzLayer(t, file("platform", p)))
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	pp := plat(p)
	cf.OS, cf.Architecture, cf.Variant = pp.OS, pp.Architecture, pp.Variant
	img, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestPullAndImportChooseHostPlatform: a pull and an import of one
// two-platform index store the same image, the host's (or the variant it
// runs), not the first the index lists nor one the CPU cannot run.
func TestPullAndImportChooseHostPlatform(t *testing.T) {
	needRoot(t)
	reg := newTestRegistry(t)
	host := platformString(HostPlatform())
	other := "linux/arm64"
	if runtime.GOARCH == "arm64" {
		other = "linux/amd64"
	}
	tests := []struct {
		name  string
		host  string // Options.Platform; empty: this machine's
		index []string
		want  int // which of index the store must hold
	}{
		{name: "this machine", index: []string{other, host}, want: 1},
		{name: "arm64 host, index without variant", host: "linux/arm64/v8", index: []string{"linux/amd64", "linux/arm64"}, want: 1},
		{name: "arm v7 host, v6 only", host: "linux/arm/v7", index: []string{"linux/amd64", "linux/arm/v6"}, want: 1},
		{name: "arm v7 host, v6 first", host: "linux/arm/v7", index: []string{"linux/arm/v6", "linux/arm/v7"}, want: 1},
		{name: "amd64 host, amd64/v3 first", host: "linux/amd64", index: []string{"linux/amd64/v3", "linux/amd64"}, want: 1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts Options
			if tt.host != "" {
				opts.Platform = *plat(tt.host)
			}
			idx := v1.ImageIndex(empty.Index)
			var imgs []v1.Image
			for _, p := range tt.index {
				img := platformVariantImage(t, p)
				imgs = append(imgs, img)
				idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat(p)}})
			}
			want := configDigest(t, imgs[tt.want])

			ref := reg.pushIndex(t, "multi:"+string(rune('a'+i)), idx)
			s := newService(t, t.TempDir(), opts)
			id, err := s.Pull(t.Context(), ref, nil)
			if err != nil {
				t.Fatal(err)
			}
			if id != want {
				t.Errorf("pull stored %s, want %s's image %s", id, tt.index[tt.want], want)
			}

			name := "example.com/multi:" + string(rune('a'+i))
			archive := dirTar(t, ociLayout(t, func(p layout.Path) {
				if err := p.AppendIndex(idx, named(name)); err != nil {
					t.Fatal(err)
				}
			}))
			s2 := newService(t, t.TempDir(), opts)
			got, err := importBytes(t, s2, archive, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].ID != want {
				t.Errorf("import stored %v, want %s's image %s", got, tt.index[tt.want], want)
			}
		})
	}

	// No image the host runs: the pull fails naming what the index has,
	// and stores nothing.
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: platformVariantImage(t, "linux/arm/v7"), Descriptor: v1.Descriptor{Platform: plat("linux/arm/v7")}})
	ref := reg.pushIndex(t, "multi:none", idx)
	s := newService(t, t.TempDir(), Options{Platform: *plat("linux/arm/v6")})
	if _, err := s.Pull(t.Context(), ref, nil); err == nil || !strings.Contains(err.Error(), "no image for linux/arm/v6 in the index (it has linux/arm/v7)") {
		t.Errorf("pull of an index without the host's platform: %v", err)
	}
	assertEmptyStore(t, s)
}
