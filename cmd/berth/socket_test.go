package main

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLockState(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockState(dir); err == nil || !strings.Contains(err.Error(), "another berth is already using state dir") {
		t.Fatalf("second lock: %v, want refusal", err)
	}
	unlock()
	unlock2, err := lockState(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

func TestListenSocket(t *testing.T) {
	tests := []struct {
		name    string
		subdir  bool // socket in a dir that does not exist yet
		prepare func(t *testing.T, path string)
		wantErr string
	}{
		{name: "fresh path"},
		{name: "missing parent dir", subdir: true},
		{name: "stale socket", prepare: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}},
		{name: "live socket", prepare: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, wantErr: "another berth is already serving"},
		{name: "regular file", prepare: func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "is not a socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("/tmp", "berth-sock-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			path := filepath.Join(dir, "berth.sock")
			if tt.subdir {
				path = filepath.Join(dir, "sub", "berth.sock")
			}
			if tt.prepare != nil {
				tt.prepare(t, path)
			}
			s, err := listenSocket(path, "")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(path)
			if err != nil || fi.Mode().Perm() != 0o660 {
				t.Errorf("socket mode %v (%v), want 0660", fi.Mode(), err)
			}
			s.remove(slog.Default())
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("socket left behind after remove: %v", err)
			}
		})
	}
}

// TestListenPrivate: the socket is bound with no access for group or
// others whatever the umask, and the umask is given back.
func TestListenPrivate(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := listenPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("socket bound with mode %v under umask 0: others could connect before the chmod", perm)
	}
	if got := unix.Umask(0); got != 0 {
		t.Errorf("umask left at %#o, want the caller's 0", got)
	}
}

func TestLookupGroup(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"", -1, false},
		{"0", 0, false},
		{"4242", 4242, false},
		{"root", 0, false},
		{"no-such-group-berth", -1, true},
	}
	for _, tt := range tests {
		got, err := lookupGroup(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
			t.Errorf("lookupGroup(%q) = %d, %v; want %d (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
