// Package version holds the build version of berth.
package version

// Version is overwritten at build time:
//
//	go build -ldflags "-X github.com/berth-runtime/berth/internal/version.Version=v0.1.0" ./cmd/berth
//
// It is a var, not a const, only because -X can set nothing else.
var Version = "0.0.0-dev"

// CRIVersion is the version of berth's CRI implementation reported in
// VersionResponse.Version; it changes when the served API surface does.
const CRIVersion = "0.1.0"
