// Command berth is the berth CRI runtime daemon.
//
// Keep this package cheap to start: package-level initialisation and init()
// functions also run before `berth pause`, the built-in pause run from this
// binary where berth-pause is not installed, so they must have no side
// effects. libcontainer's init runs from berth-spawn, and the pods' own
// processes are berth-podproc and berth-monitor, not this binary.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/sandbox/pause"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run dispatches on the first argument before any flag is parsed, so that
// the hidden pause subcommand can take over the process with its own
// argument conventions.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 {
		switch args[1] {
		case "config":
			return configCommand(args[2:], stdout, stderr)
		case "images":
			return imagesCommand(args[2:], os.Stdin, stdout, stderr)
		case pause.Subcommand:
			return pause.Main(args[2:])
		}
	}
	return daemonCommand(args[1:], stdout, stderr)
}

const configUsage = "usage: berth config default   print the default configuration file"

func configCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] != "default" {
		fmt.Fprintln(stderr, configUsage)
		return 2
	}
	if err := config.Default().WriteTOML(stdout); err != nil {
		fmt.Fprintf(stderr, "berth: %v\n", err)
		return 1
	}
	return 0
}
