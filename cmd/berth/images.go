package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/faultpoint"
)

// newImages opens the image store under <root>/image with the registry
// settings of cfg.
// metrics is nil where nothing serves them (the offline commands).
func newImages(ctx context.Context, cfg *config.Config, log *slog.Logger, faults *faultpoint.Point, metrics *image.Metrics) (*image.Service, error) {
	stall := image.DefaultStallTimeout
	if cfg.ImagePullStallTimeout != "" {
		d, err := time.ParseDuration(cfg.ImagePullStallTimeout)
		if err != nil {
			return nil, fmt.Errorf("image_pull_stall_timeout: %w", err)
		}
		stall = d
		if d == 0 {
			stall = -1 // the image package's "disabled"
		}
	}
	regs := make(map[string]image.RegistryHost, len(cfg.Registries))
	for host, r := range cfg.Registries {
		regs[host] = image.RegistryHost{
			Mirrors:       r.Mirrors,
			Insecure:      r.Insecure,
			Username:      r.Username,
			Password:      r.Password,
			Auth:          r.Auth,
			IdentityToken: r.IdentityToken,
		}
	}
	pinned := slices.Clone(cfg.PinnedImages)
	if cfg.PauseImage != "" {
		pinned = append(pinned, cfg.PauseImage)
	}
	return image.New(ctx, image.Options{
		Root:                   filepath.Join(cfg.Root, "image"),
		Registries:             regs,
		RegistryConfigPath:     cfg.RegistryConfigPath,
		StallTimeout:           stall,
		MaxConcurrentDownloads: cfg.MaxConcurrentDownloads,
		PinnedImages:           pinned,
		Logger:                 log,
		Faults:                 faults,
		Metrics:                metrics,
	})
}
