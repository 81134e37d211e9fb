package monitor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExitFile(t *testing.T) {
	dir := t.TempDir()
	if e, err := ReadExit(dir); e != nil || err != nil {
		t.Fatalf("no file: %v %v", e, err)
	}
	want := &Exit{Code: 137, Signal: 9, FinishedAt: time.Unix(5, 6).UTC(), OOMKilled: true}
	if err := WriteExit(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadExit(dir)
	if err != nil || *got != *want {
		t.Fatalf("got %+v %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temp files left: %v", entries)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, ExitFile)); !strings.HasPrefix(string(data), `{"formatVersion":1,`) {
		t.Errorf("exit file %s: no format version first", data)
	}
	// Written by a monitor of before versions: version 1.
	os.WriteFile(filepath.Join(dir, ExitFile), []byte(`{"code":3,"finishedAt":"1970-01-01T00:00:05Z"}`), 0o600)
	if got, err := ReadExit(dir); err != nil || got.Code != 3 {
		t.Errorf("unversioned exit file: %+v %v", got, err)
	}
	os.WriteFile(filepath.Join(dir, ExitFile), []byte(`{"formatVersion":2,"code":3}`), 0o600)
	if _, err := ReadExit(dir); err == nil || !strings.Contains(err.Error(), "format version 2, newer than version 1") {
		t.Errorf("exit file of a newer monitor: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ExitFile), []byte("{"), 0o600)
	if _, err := ReadExit(dir); err == nil {
		t.Fatal("torn file accepted")
	}
}

func TestUnreachable(t *testing.T) {
	c := &Client{Socket: filepath.Join(t.TempDir(), "none.sock")}
	_, err := c.Call(context.Background(), &Request{Op: OpPing})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("got %v", err)
	}
}

func TestPathsFitUnixSocket(t *testing.T) {
	p := PathsFor("/run/berth", strings.Repeat("a", 64))
	if len(p.Socket) > 100 || !strings.HasPrefix(p.Log, p.Dir) {
		t.Fatalf("paths %+v", p)
	}
}
