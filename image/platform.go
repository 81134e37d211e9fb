package image

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// HostPlatform is the platform this machine runs images of: berth's own
// OS and architecture and, for arm, the CPU's architecture version (an
// arm64 host is arm64/v8). Pulls and imports pick it from an index.
func HostPlatform() v1.Platform {
	var cpuinfo []byte
	if runtime.GOARCH == "arm" {
		cpuinfo, _ = os.ReadFile("/proc/cpuinfo")
	}
	return hostPlatform(runtime.GOOS, runtime.GOARCH, cpuinfo, buildSetting("GOARM"))
}

// hostPlatform is HostPlatform from what it reads: the kernel's
// /proc/cpuinfo for a 32-bit arm CPU (a v7 CPU runs v7 images even when
// berth was built for v6), else the GOARM berth was built with, the
// oldest CPU it can run on.
func hostPlatform(goos, goarch string, cpuinfo []byte, goarm string) v1.Platform {
	p := v1.Platform{OS: goos, Architecture: goarch}
	if goarch == "arm" {
		p.Variant = armVariant(cpuinfo, goarm)
	}
	return normalizePlatform(p)
}

func armVariant(cpuinfo []byte, goarm string) string {
	for line := range bytes.Lines(cpuinfo) {
		key, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !strings.EqualFold(string(bytes.TrimSpace(key)), "CPU architecture") {
			continue
		}
		// "7", "8", or "5TEJ" on old cores: the leading digits are the
		// version.
		v := strings.TrimSpace(string(value))
		if n := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' }); n >= 0 {
			v = v[:n]
		}
		if v != "" {
			return "v" + v
		}
	}
	if v, _, _ := strings.Cut(goarm, ","); v != "" {
		return "v" + v
	}
	return "v7" // Go's default GOARM on linux
}

func buildSetting(key string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// normalizePlatform spells p the way indexes mostly do, so that equal
// platforms compare equal: uname's architecture names become Go's, an
// arm64 without a variant is v8 (the only one indexes name), an arm
// without one is v7 and amd64/v1 is plain amd64.
func normalizePlatform(p v1.Platform) v1.Platform {
	p.OS = strings.ToLower(p.OS)
	p.Architecture, p.Variant = strings.ToLower(p.Architecture), strings.ToLower(p.Variant)
	switch p.Architecture {
	case "x86_64", "x86-64":
		p.Architecture = "amd64"
	case "aarch64":
		p.Architecture = "arm64"
	case "i386", "i486", "i586", "i686":
		p.Architecture = "386"
	case "armhf":
		p.Architecture, p.Variant = "arm", "v7"
	case "armel":
		p.Architecture, p.Variant = "arm", "v6"
	}
	if p.Variant != "" && !strings.HasPrefix(p.Variant, "v") && strings.Trim(p.Variant, "0123456789.") == "" {
		p.Variant = "v" + p.Variant // "8" as some indexes write it
	}
	switch {
	case p.Architecture == "arm64" && p.Variant == "":
		p.Variant = "v8"
	case p.Architecture == "arm" && p.Variant == "":
		p.Variant = "v7"
	case p.Architecture == "amd64" && p.Variant == "v1":
		p.Variant = ""
	}
	return p
}

// armVersions are the 32-bit arm versions, newest first: a CPU runs
// images of its own version and of every older one.
var armVersions = []string{"v8", "v7", "v6", "v5"}

// platformRank tells whether a host of platform host (normalized) runs
// images of platform p, and how well: 0 for the host's own platform,
// more for each version older that the host still runs.
func platformRank(host, p v1.Platform) (int, bool) {
	p = normalizePlatform(p)
	if p.OS != host.OS || p.Architecture != host.Architecture {
		return 0, false
	}
	if p.Variant == host.Variant {
		return 0, true
	}
	if host.Architecture == "arm" {
		h, c := slices.Index(armVersions, host.Variant), slices.Index(armVersions, p.Variant)
		if h >= 0 && c > h {
			return c - h, true
		}
	}
	return 0, false
}

// choosePlatform picks from an index's manifests the image for host: its
// own platform, else the newest older variant it runs (an arm/v7 host
// takes arm/v6 when the index has no v7), the first of equals in the
// index's order. A manifest without a platform is linux/amd64, as the
// image spec and every registry client take it. An error names the
// platforms the index has.
func choosePlatform(host v1.Platform, manifests []v1.Descriptor) (v1.Descriptor, error) {
	host = normalizePlatform(host)
	best, bestRank := -1, 0
	var seen []string
	for i, m := range manifests {
		if !m.MediaType.IsImage() {
			continue
		}
		p := v1.Platform{OS: "linux", Architecture: "amd64"}
		if m.Platform != nil {
			p = *m.Platform
		}
		seen = append(seen, platformString(p))
		if r, ok := platformRank(host, p); ok && (best < 0 || r < bestRank) {
			best, bestRank = i, r
		}
	}
	if best < 0 {
		has := strings.Join(seen, ", ")
		if has == "" {
			has = "no image at all"
		}
		return v1.Descriptor{}, fmt.Errorf("no image for %s in the index (it has %s)", platformString(host), has)
	}
	return manifests[best], nil
}
