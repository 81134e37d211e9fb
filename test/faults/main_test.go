// Package faults_test drives a real berth under faults, bad input, load
// and attack (issue 10): crashes at named steps, killed monitors and
// pauses, full disks, a wiped state root, many clients, non-root clients
// and hostile containers and images. Run it as
//
//	hack/registry -- go test -count=1 -p 1 ./test/faults/ -v
//
// Tests that need the test registry or root skip without them.
package faults_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
