package network

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/berth-runtime/berth/internal/netnsdo"
)

// Do runs fn on a locked OS thread that has entered the network namespace
// pinned at path. Sockets fn creates belong to that namespace for their
// whole life, and /proc/thread-self/net shows it. The thread is thrown
// away if it cannot return to its own namespace.
func Do(path string, fn func() error) error { return netnsdo.Do(path, fn) }

// DialLocal connects to port on the loopback address of the network
// namespace pinned at path (the host's when path is empty): IPv4 first,
// then IPv6, as "localhost" resolves. The addresses are dialled one by
// one on the namespace's thread: a dual-stack dial would race a second
// goroutine, on another thread, in another namespace.
func DialLocal(ctx context.Context, path string, port int32) (net.Conn, error) {
	var conn net.Conn
	dial := func() error {
		var d net.Dialer
		var errs []error
		for _, addr := range []string{"127.0.0.1", "::1"} {
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
			if err == nil {
				conn = c
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	var err error
	if path == "" {
		err = dial()
	} else {
		err = Do(path, dial)
	}
	if err != nil {
		return nil, err
	}
	return conn, nil
}
