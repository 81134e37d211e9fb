// Package upgrade_test upgrades berth in place under running pods: a
// berth built from an earlier commit starts pods and containers, then the
// binaries under test take over its state, and everything the earlier one
// made (its monitors still running) must be served. Run it as
//
//	hack/registry -- go test -count=1 ./test/upgrade/ -v
//
// BERTH_UPGRADE_FROM names the commit upgraded from; by default, the
// commit before the newest change to the monitor.
package upgrade_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
