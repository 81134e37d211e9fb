package kubehost

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// LockPath serialises every kubelet run on one machine (test/kubelet,
// hack/node-e2e, hack/density; several clones may run at once): a kubelet
// writes /var/lib/kubelet/device-plugins and kernel settings whatever its
// root dir.
const LockPath = "/run/berth-kubelet-test.lock"

// Lock waits up to 30 minutes for LockPath (calling waiting once if it
// has to wait) and returns its release.
func Lock(ctx context.Context, waiting func()) (release func(), err error) {
	f, err := os.OpenFile(LockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	logged := false
	for deadline := time.Now().Add(30 * time.Minute); ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) || ctx.Err() != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", LockPath, err)
		}
		if !logged && waiting != nil {
			waiting()
			logged = true
		}
		time.Sleep(time.Second)
	}
}
