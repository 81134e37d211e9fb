// Package netnsdo runs a function on an OS thread inside a pinned network
// namespace. It depends on nothing but the standard library and
// x/sys/unix, so that small programs (pause, the monitor) can use it.
package netnsdo

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a locked OS thread that has entered the network namespace
// pinned at path. Sockets fn creates belong to that namespace for their
// whole life, processes it starts are born in it, and
// /proc/thread-self/net shows it. The thread is thrown away if it cannot
// return to its own namespace.
func Do(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, back := doIn(path, fn)
		if back {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

func doIn(path string, fn func() error) (err error, back bool) {
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return fmt.Errorf("open current netns: %w", err), true
	}
	defer orig.Close()
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err), true
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns %s: %w", path, err), true
	}
	err = fn()
	if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr != nil {
		return errors.Join(err, fmt.Errorf("return from netns %s: %w", path, serr)), false
	}
	return err, true
}
