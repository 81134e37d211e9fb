package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestNotifyReady(t *testing.T) {
	for _, tt := range []struct {
		name string
		addr func(dir string) string
	}{
		{"path", func(dir string) string { return filepath.Join(dir, "notify") }},
		{"abstract", func(dir string) string { return "@berth-notify-test-" + filepath.Base(dir) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.addr(t.TempDir())
			listen := addr
			if listen[0] == '@' {
				listen = "\x00" + listen[1:]
			}
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: listen, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			t.Setenv(notifySocketEnv, addr)
			got := takeNotifySocket()
			if _, set := os.LookupEnv(notifySocketEnv); set || got != addr {
				t.Fatalf("takeNotifySocket = %q, still in the environment: %v", got, set)
			}
			if err := notifyReady(got); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			n, err := conn.Read(buf)
			if err != nil || string(buf[:n]) != "READY=1" {
				t.Fatalf("read %q, %v; want READY=1", buf[:n], err)
			}
		})
	}
	if err := notifyReady(""); err != nil {
		t.Errorf("without a socket: %v", err)
	}
}
