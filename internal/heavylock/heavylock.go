// Package heavylock takes the machine's heavy-build lock: a flock(2) file
// that the project's slow builds (Go builds of Kubernetes, debootstrap)
// hold one at a time, so that they do not share a small machine's cores.
// The shell scripts take the same lock with flock(1).
package heavylock

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"
)

// Take waits for the lock at path and returns what releases it; with an
// empty path there is no lock to take. It says once in log that it waits.
func Take(ctx context.Context, path string, log *slog.Logger) (unlock func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("open heavy-build lock: %w", err)
	}
	waited := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !waited {
			log.Info("waiting for the heavy-build lock", "lock", path)
			waited = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
