// Command berth-pause is the pod infra process (see package pause). Built
// with cgo (as hack/build and the tests build it), its C part, pause.c,
// runs as a constructor before the Go runtime starts and never returns:
// pause then costs ~0.15 MB of memory per pod (PSS) instead of ~0.8 MB,
// and starts in well under a millisecond. Built without cgo, or given the
// older BERTH_PAUSE_SPEC environment, it is the Go pause.Main.
package main

// #cgo CFLAGS: -Os -Wall -Wextra -Werror
import "C"

import (
	"os"

	"github.com/berth-runtime/berth/sandbox/pause"
)

func main() { os.Exit(pause.Main(os.Args[1:])) }
