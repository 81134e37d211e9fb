// Package security_test tries against a real berth every published
// container escape and node denial of service of its peers (containerd,
// CRI-O, runc) since 2019 that can apply to a CRI runtime built on
// libcontainer: one test per advisory class, named after the advisory,
// each written from the advisory and its fix, driving berth through its
// CRI socket (and its admin socket where the class needs it) with images
// built in the test and pushed to the local test registry, or served by
// a hostile registry of the test's own on loopback.
//
// docs/security.md holds the threat model and the table of advisories,
// tests and results. Run it as
//
//	hack/registry -- go test -count=1 ./test/security/ -v
//
// Tests that need root or the test registry skip without them.
package security_test

import (
	"os"
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) {
	// The test binary re-executed as another user (asUser) runs one
	// helper and exits, instead of the tests.
	if op := os.Getenv(helperEnv); op != "" {
		os.Exit(helperMain(op, os.Args[1:]))
	}
	framework.Main(m)
}
