package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/errdefs"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/pods"
)

// A container restored from a checkpoint archive (KEP-2008, as CRI-O
// does it): CreateContainer whose image is the path of an archive that
// CheckpointContainer wrote (archive.go) makes the container of the
// request (its metadata, labels, annotations, mounts, log path, the new
// pod) on the checkpointed container's image, its writable layer
// brought back from the archive; StartContainer has CRIU restore the
// process tree into it instead of starting a new one (restoreStart).

// restoreSource is the archive a create restores from.
type restoreSource struct {
	location string
	desc     *checkpointConfig
	// image is what the image is leased by: its id where the archive
	// has it, the checkpointed container's own image.
	image string
}

// prepareRestore checks a create from the archive at location before
// anything is made, and returns the request's config with the archive's
// image in place of the path. ErrInvalid: an archive berth cannot
// restore, or a terminal; ErrState: the pod's process is the Go monitor;
// ErrCheckpointUnavailable: CRIU does not work here.
func (s *Service) prepareRestore(podID, location string, cfg *runtimeapi.ContainerConfig) (*restoreSource, *runtimeapi.ContainerConfig, error) {
	desc, err := inspectArchive(location)
	if err != nil {
		return nil, nil, err
	}
	if cfg.GetTty() {
		return nil, nil, fmt.Errorf("%w: config.tty: a container restored from a checkpoint has no terminal", ErrInvalid)
	}
	if !s.opts.PodProcesses.CanRestore(podID) {
		return nil, nil, fmt.Errorf("%w: pod sandbox %s: %w; a pod made with pod_process = \"podproc\" can", ErrState, podID, pods.ErrNoRestore)
	}
	if why := s.criu.unavailable(); why != "" {
		s.log.Warn("restore refused: CRIU does not work on this host", "archive", location, "reason", why)
		return nil, nil, ErrCheckpointUnavailable
	}
	src := &restoreSource{location: location, desc: desc, image: desc.RootfsImageRef}
	name := desc.RootfsImage
	if name == "" {
		name = desc.RootfsImageName
	}
	if name == "" {
		name = desc.RootfsImageRef
	}
	if src.image == "" {
		src.image = name
	}
	cfg = proto.Clone(cfg).(*runtimeapi.ContainerConfig)
	cfg.Image = &runtimeapi.ImageSpec{Image: name, UserSpecifiedImage: name}
	return src, cfg, nil
}

// restoreImageError says what a restore whose image is not here needs.
func restoreImageError(src *restoreSource, err error) error {
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("%w: checkpoint archive %s: its image %s (%s) is not present on this node: pull it first: %w",
			ErrNotFound, src.location, src.desc.RootfsImage, src.image, err)
	}
	return fmt.Errorf("checkpoint archive %s: image %s: %w", src.location, src.image, err)
}

// restoreRootfs extracts the archive into the container's dir
// (monitor.RestoreDir), where the restore reads CRIU's images, and
// brings the checkpointed writable layer into the mounted rootfs.
func (c *creation) restoreRootfs(context.Context) error {
	dir := filepath.Join(c.rec.Dir, monitor.RestoreDir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("container %s: %w", c.rec.ID, err)
	}
	// The archive passed inspectArchive: what fails here is the disk,
	// or an archive changed meanwhile.
	if err := extractArchive(c.restore.location, dir); err != nil {
		return fmt.Errorf("container %s: checkpoint archive %s: extract: %w", c.rec.ID, c.restore.location, err)
	}
	if err := applyCheckpointRootfs(c.rootfs(), dir); err != nil {
		return fmt.Errorf("container %s: checkpoint archive %s: rootfs: %w", c.rec.ID, c.restore.location, err)
	}
	if err := writeRestoreOptions(dir, c.restore.desc); err != nil {
		return fmt.Errorf("container %s: %w", c.rec.ID, err)
	}
	// Written into the rootfs: the copy is not needed any more.
	return os.Remove(filepath.Join(dir, rootfsDiff))
}

// writeRestoreOptions writes, beside the extracted images in dir, the
// CRIU options the restore must ask for because the dump was made with
// them (monitor.RestoreOptionsFile), as the archive's config.dump says:
// CRIU restores established TCP connections only with tcp-established.
func writeRestoreOptions(dir string, desc *checkpointConfig) error {
	data, err := json.Marshal(&monitor.RestoreOptions{TCPEstablished: desc.TCPEstablished})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, monitor.RestoreOptionsFile), data, 0o600)
}

// restoreStart is StartContainer of a container made from a checkpoint:
// the pod's process has the spawn helper create it with the process tree
// CRIU restores (pods.Client.Restore), running when it returns, as the
// pod process's child, its output in the container's log. It returns
// the restored init's pid.
func (s *Service) restoreStart(ctx context.Context, mon pods.Client, c *ctr, rec *Record) (int, error) {
	dir := filepath.Join(rec.Dir, monitor.RestoreDir)
	if _, err := os.Stat(filepath.Join(dir, checkpointDir)); err != nil {
		return 0, fmt.Errorf("%w: container %s: its checkpoint is gone (a restore ran already): %w", ErrState, rec.ID, err)
	}
	pid, err := mon.Restore(ctx, rec.ID, &monitor.CreateRequest{Dir: rec.Dir, LogPath: rec.LogPath, Stdin: c.cfg.GetStdin(), StdinOnce: c.cfg.GetStdinOnce()})
	if errors.Is(err, monitor.ErrUnreachable) {
		return 0, fmt.Errorf("%w: the monitor of pod %s is gone: %w", ErrState, rec.PodID, err)
	}
	if err != nil {
		if tail := logTail(filepath.Join(dir, "restore.log")); tail != "" {
			err = fmt.Errorf("%w (restore.log: %s)", err, tail)
		}
		return 0, fmt.Errorf("restore: %w", err)
	}
	// CRIU's images are a copy of the process's memory: not kept.
	if err := os.RemoveAll(dir); err != nil { // under the container's own dir
		s.log.Warn("cannot remove a restored checkpoint", "container", rec.ID, "dir", dir, "error", err)
	}
	go s.watch(c, mon)
	return pid, nil
}

// restorePending tells whether rec is a container made from a checkpoint
// whose restore has not run: its pod's process knows nothing of it yet.
func restorePending(rec *Record) bool {
	return rec.Restore && rec.State == StateCreated && rec.Pid == 0
}

// stopUnrestored ends a container made from a checkpoint and never
// started: there is no process, as for a created container killed before
// its start.
func (s *Service) stopUnrestored(c *ctr) {
	s.setExit(c, &monitor.Exit{Code: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), FinishedAt: time.Now(),
		Message: "stopped before its restore from a checkpoint"}, "")
	rec := c.snapshot()
	s.releaseResets(s.ctx, &rec)
}

// killRestored kills a process restored while a stop ended the
// container: nobody would stop it later.
func (s *Service) killRestored(ctx context.Context, mon pods.Client, id string) {
	err := mon.Signal(ctx, id, syscall.SIGKILL)
	if err != nil && !monitor.IsCode(err, monitor.CodeNotRunning) {
		s.log.Warn("container stopped during its restore: cannot kill the restored process", "container", id, "error", err)
	}
}
