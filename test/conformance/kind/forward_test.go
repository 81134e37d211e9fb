package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
)

// An upper-casing server behind the forwarder: what goes in comes back
// changed, so the bytes went through the target, both ways, and the
// half-close of the client reaches the server.
func TestForward(t *testing.T) {
	srv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- forward(ctx, l, srv.Addr().String()) }()

	for _, msg := range []string{"hello", strings.Repeat("x", 1<<20)} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(bufio.NewReader(c))
		c.Close()
		if err != nil || string(got) != strings.ToUpper(msg) {
			t.Fatalf("through the forwarder: %d bytes %v, want %d", len(got), err, len(msg))
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("forward after cancel: %v", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Fatal("the listener still accepts after cancel")
	}
}
