// Package sandbox_test drives pod sandboxes through a real berth daemon's
// CRI socket, on this host's real bridge, host-local and portmap plugins.
// Every test has its own daemon, CNI conf dir, bridge, subnet, lease dir
// and cgroup parent, and removes what it made.
package sandbox_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
