// Package streaming_test drives exec, attach and port-forward sessions
// through a real berth daemon, with crictl as the client (SPDY and
// WebSocket transports, terminals on a pseudo-terminal).
package streaming_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
