package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// forward accepts connections on l and joins each to a new connection to
// target, until ctx ends. It lets kind's nodes reach the test registry,
// which listens on the host's loopback only: the registry stays where it
// is, and the nodes get an address on their own Docker network (its
// gateway, the host).
func forward(ctx context.Context, l net.Listener, target string) error {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", l.Addr(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			var d net.Dialer
			t, err := d.DialContext(ctx, "tcp", target)
			if err != nil {
				slog.Warn("forward: dial", "target", target, "from", c.RemoteAddr(), "error", err)
				return
			}
			defer t.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				// The other side sees EOF and may still answer.
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(t, c)
			go pipe(c, t)
			select {
			case <-done:
				<-done
			case <-ctx.Done():
			}
		}()
	}
}
