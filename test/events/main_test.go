// Package events_test checks GetContainerEvents on a real berth daemon:
// every lifecycle change of pods and containers, including exits that no
// request caused, with the pod's and its containers' statuses.
package events_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
