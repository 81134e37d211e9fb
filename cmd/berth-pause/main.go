// Command berth-pause is the pod infra process (see package pause), as a
// binary of its own: the same code as `berth pause`, without the daemon's
// dependencies, whose package initialisation alone costs every pod ~11 MB
// of memory. berth uses it when it is installed next to the berth binary.
package main

import (
	"os"

	"github.com/berth-runtime/berth/sandbox/pause"
)

func main() { os.Exit(pause.Main()) }
