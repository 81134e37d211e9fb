// Package stats_test checks the stats, metrics and Stream* RPCs of a real
// berth daemon: numbers that move when containers work, network counters
// read inside pods, and the figures of ListContainerStats at 50
// containers.
package stats_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
