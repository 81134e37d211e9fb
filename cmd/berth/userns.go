package main

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/sandbox"
)

// probeUserNamespaces tells whether pods may have their own user
// namespace here, and logs why not: the built-in pause must start in a
// new user namespace, and every filesystem a container's files come from
// (image layers, container state, pod files, the pods' /dev/shm tmpfs)
// must allow id-mapped mounts.
func probeUserNamespaces(cfg *config.Config, log *slog.Logger) bool {
	start := time.Now()
	err := func() error {
		if cfg.PauseImage != "" {
			return errors.New("pause_image is set: a pod's user namespace is made by the built-in pause")
		}
		args, _, err := sandbox.PauseCommand(&sandbox.PauseSpec{PodID: "userns-probe"}, nil)
		if err != nil {
			return err
		}
		layers := filepath.Join(cfg.Root, "image", "layers")
		containers := filepath.Join(cfg.State, "containers")
		shm, err := os.MkdirTemp(cfg.State, ".userns-probe-")
		if err != nil {
			return err
		}
		defer os.Remove(shm)
		if err := unix.Mount("shm", shm, "tmpfs", 0, "size=4k"); err != nil {
			return err
		}
		defer unix.Unmount(shm, unix.MNT_DETACH)
		return container.ProbeUserNamespaces(args, []string{layers, containers, filepath.Join(cfg.State, "sandboxes"), shm}, []string{containers})
	}()
	if err != nil {
		log.Warn("pods cannot have their own user namespace", "error", err)
		return false
	}
	log.Info("pods may have their own user namespace", "probe", time.Since(start))
	return true
}
