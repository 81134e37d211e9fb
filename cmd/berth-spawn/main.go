// Command berth-spawn is the pod monitor's short-lived helper (package
// monitor/spawn): one libcontainer create, exec, update or destroy per
// run, or a checkpoint, which berth runs it for. It is libcontainer's
// init as well: each new container or exec process re-executes it
// before its user's program runs.
package main

import (
	"log/slog"
	"os"

	"github.com/opencontainers/runc/libcontainer"
	// Registers device cgroup rule support with libcontainer.
	_ "github.com/opencontainers/cgroups/devices"
	// The C constructor that joins namespaces before the Go runtime starts.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/monitor/spawn"
)

func init() {
	// libcontainer re-executes this binary as "init" inside each new
	// container or exec; that must happen before main.
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("helper", os.Getpid())
	os.Exit(spawn.Main(faultpoint.FromEnv(log)))
}
