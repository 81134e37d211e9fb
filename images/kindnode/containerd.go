package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Labels containerd's CRI reads on an image: pinned images are reported
// as such to the kubelet (whose image GC then leaves them alone, as it
// leaves berth's --pinned preloads), managed ones as the CRI's own.
const (
	pinnedLabel  = "io.cri-containerd.pinned=pinned"
	managedLabel = "io.cri-containerd.image=managed"
)

// preloadContainerd imports the archives into the twin image's containerd
// store (/var/lib/containerd, under /var as berth's store is), unpacked
// into the overlayfs snapshotter the node's containerd uses, at build
// time: a node then starts with the images in place, as a kindest/node
// does. No offline tool writes containerd's metadata, so a containerd of
// the same version runs on the host for the import, on the image's store
// and a private state dir and socket, its CRI off, in a mount namespace
// of its own (its temporary mounts never show on the host), and stops
// before the image is made.
func (b *builder) preloadContainerd(ctx context.Context, dir, root string, archives []string) error {
	if len(archives) == 0 {
		return nil
	}
	start := time.Now()
	store := filepath.Join(root, "var/lib/containerd")
	if err := os.MkdirAll(store, 0o711); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	work := filepath.Join(dir, "containerd")
	for _, d := range []string{"state", "tmp", "opt"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o700); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	sock := filepath.Join(work, "c.sock")
	conf := fmt.Sprintf(`version = 3
root = %q
state = %q
temp = %q
# Only content, metadata, snapshots and the differ take part in an import.
disabled_plugins = ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images', 'io.containerd.nri.v1.nri']

[grpc]
  address = %q
[ttrpc]
  address = %q

[plugins.'io.containerd.internal.v1.opt']
  path = %q
`, store, filepath.Join(work, "state"), filepath.Join(work, "tmp"), sock, sock+".ttrpc", filepath.Join(work, "opt"))
	confPath := filepath.Join(work, "config.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	logPath := filepath.Join(work, "containerd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	defer logFile.Close()
	daemon := exec.Command("unshare", "--mount", "--propagation", "private",
		filepath.Join(b.containerdDir, "containerd"), "--config", confPath)
	daemon.Stdout, daemon.Stderr = logFile, logFile
	// Its own process group: a signal to the build reaches it only through stop below.
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := daemon.Start(); err != nil {
		return fmt.Errorf("preload: start containerd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(30 * time.Second):
			_ = daemon.Process.Kill()
			<-exited
			return fmt.Errorf("containerd (pid %d) did not stop 30s after SIGTERM; killed (log %s)", daemon.Process.Pid, logPath)
		}
	}
	defer stop()

	ctr := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(b.containerdDir, "ctr"),
			append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...)
		// stdout only: ctr warns on stderr (cgroup v1 is deprecated).
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	if err := waitContainerd(ctx, exited, ctr, logPath); err != nil {
		return err
	}
	for _, a := range archives {
		if _, err := ctr("images", "import", "--snapshotter", "overlayfs", a); err != nil {
			return fmt.Errorf("preload %s: %w", filepath.Base(a), err)
		}
	}
	out, err := ctr("images", "list", "--quiet")
	if err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	refs := strings.Fields(string(out))
	for _, ref := range refs {
		if _, err := ctr("images", "label", ref, pinnedLabel, managedLabel); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	if err := stop(); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	b.log.Info("preloaded into containerd", "archives", len(archives), "images", len(refs),
		"seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()))
	return checkStore(store)
}

// waitContainerd waits until the build's containerd answers, for 30 s.
func waitContainerd(ctx context.Context, exited <-chan error, ctr func(...string) ([]byte, error), logPath string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := ctr("version")
		if err == nil {
			return nil
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("preload: containerd exited at start (%v); see %s: %s", werr, logPath, tail(logPath, 10))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("preload: containerd does not answer after 30s; see %s", logPath), err)
		}
	}
}
