// Package version holds the build version of berth.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Commit are overwritten at build time:
//
//	go build -ldflags "-X github.com/berth-runtime/berth/internal/version.Version=v0.1.0 \
//	  -X github.com/berth-runtime/berth/internal/version.Commit=<sha>" ./cmd/berth
//
// They are vars, not consts, only because -X can set nothing else.
var (
	Version = "0.0.0-dev"
	Commit  = ""
)

// CRIVersion is the version of berth's CRI implementation reported in
// VersionResponse.Version; it changes when the served API surface does.
const CRIVersion = "0.1.0"

// Revision is the commit berth was built from: the release build's -X, else
// the VCS stamp go build leaves in a binary built from a checkout, else
// "unknown" (go run, go test and -buildvcs=false binaries carry none).
func Revision() string {
	if Commit != "" {
		return Commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// String is what berth --version prints: three lines, version, commit and
// the Go toolchain with the platform.
func String() string {
	return fmt.Sprintf("berth version %s\ncommit %s\ngo %s %s/%s\n",
		Version, Revision(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
