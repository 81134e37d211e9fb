// Package container_test drives containers through a real berth daemon's
// CRI socket: images from the local test registry (hack/registry), pods on
// a private bridge network, containers run by the per-pod monitor.
package container_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
