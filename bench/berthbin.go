package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/sandbox/pause"
)

// berthBinaries are the programs of a berth installation that the timings
// run as berth would: the monitor and the pause command.
type berthBinaries struct {
	monitor string
	pause   []string
}

// defaultBerth is $BERTH_BINARY (hack/env.sh sets it), else the berth
// next to this program (hack/build and go build -o put both in
// _output/bin), else berth on PATH.
func defaultBerth() string {
	if b := os.Getenv("BERTH_BINARY"); b != "" {
		return b
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "berth"); isExecutable(p) {
			return p
		}
	}
	if p, err := exec.LookPath("berth"); err == nil {
		return p
	}
	return "berth"
}

// findBerthBinaries finds the monitor and pause that berth would use: they
// are installed next to it; pause falls back to berth's built-in one.
func findBerthBinaries(berth string) (berthBinaries, error) {
	if !isExecutable(berth) {
		return berthBinaries{}, fmt.Errorf("berth binary %q not found (hack/build builds it; -berth names it)", berth)
	}
	dir := filepath.Dir(berth)
	b := berthBinaries{monitor: filepath.Join(dir, monitor.BinaryName), pause: []string{berth, pause.Subcommand}}
	if !isExecutable(b.monitor) {
		return berthBinaries{}, fmt.Errorf("%s not found next to %s", monitor.BinaryName, berth)
	}
	if p := filepath.Join(dir, pause.Binary); isExecutable(p) {
		b.pause = []string{p}
	}
	return b, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// openImages opens an image store under <root>/image with the registry
// settings of cfg, as the daemon does, for the timings' one pull.
func openImages(ctx context.Context, cfg *config.Config, log *slog.Logger) (*image.Service, error) {
	regs := make(map[string]image.RegistryHost, len(cfg.Registries))
	for host, r := range cfg.Registries {
		regs[host] = image.RegistryHost{
			Mirrors: r.Mirrors, Insecure: r.Insecure,
			Username: r.Username, Password: r.Password, Auth: r.Auth, IdentityToken: r.IdentityToken,
		}
	}
	return image.New(ctx, image.Options{
		Root:                   filepath.Join(cfg.Root, "image"),
		Registries:             regs,
		RegistryConfigPath:     cfg.RegistryConfigPath,
		StallTimeout:           image.DefaultStallTimeout,
		MaxConcurrentDownloads: cfg.MaxConcurrentDownloads,
		Logger:                 log,
	})
}
