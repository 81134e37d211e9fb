package main

import (
	"context"
	"log/slog"
	"os"
)

// runtime is the CRI runtime under test, on temp roots under its work dir.
type runtime interface {
	// start writes the runtime's configuration (a copy goes to logs),
	// starts it and waits for it to answer on its socket.
	start(ctx context.Context, log *slog.Logger, logs string) error
	// stop removes what failed specs left and stops the runtime; it
	// returns the number of leaks it saw itself.
	stop(log *slog.Logger) int
	endpoint() string
	nriSocket() string
	logPath() string
	workDir() string
	// cgroupParent is the directory, under each hierarchy's root, where
	// the runtime puts the cgroups of pods critest gives no parent.
	cgroupParent() string
	// ids are the pod and container ids the runtime named.
	ids() map[string]bool
}

func newRuntime(e env, work string) runtime {
	if e.runtime == "containerd" {
		return &containerd{dir: e.containerdDir, runc: e.runc, work: work, cniBinDir: e.cniBinDir, registry: e.registry, cgroupDriver: e.cgroupDriver}
	}
	return &berth{bin: e.berth, work: work, cniBinDir: e.cniBinDir, registry: e.registry, cgroupDriver: e.cgroupDriver, podProcess: os.Getenv("BERTH_CRITEST_POD_PROCESS")}
}
