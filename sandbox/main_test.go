package sandbox

import (
	"os"
	"testing"

	"github.com/berth-runtime/berth/sandbox/pause"
)

// The test binary doubles as pause, as the berth binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == pause.Subcommand {
		os.Exit(pause.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}
