package runtimeharness

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDaemonStartAndStop runs processes that never answer CRI: Start
// fails, and Stop still stops what runs (after clean) or reports what
// exited.
func TestDaemonStartAndStop(t *testing.T) {
	for _, tc := range []struct {
		name      string
		argv      []string
		cancel    bool
		startErr  string
		stopLeaks int // what Stop returns; clean returns 2
		cleaned   bool
	}{
		{name: "exits during start-up", argv: []string{"/bin/sh", "-c", "exit 3"}, startErr: "exited during start-up", stopLeaks: 1},
		{name: "never answers", argv: []string{"sleep", "30"}, startErr: "not answering", stopLeaks: 2, cleaned: true},
		{name: "interrupted", argv: []string{"sleep", "30"}, cancel: true, startErr: "context canceled", stopLeaks: 2, cleaned: true},
		{name: "no binary", argv: []string{"/nonexistent/berth"}, startErr: "start test-daemon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := &Daemon{Name: "test-daemon", Argv: tc.argv, Endpoint: "unix://" + filepath.Join(dir, "none.sock"), LogPath: filepath.Join(dir, "log"), ReadyIn: 300 * time.Millisecond, OwnGroup: true}
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancel {
				cancel()
			}
			defer cancel()
			err := d.Start(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.startErr) {
				t.Fatalf("Start: %v, want an error containing %q", err, tc.startErr)
			}
			cleaned := false
			clean := func(endpoint string) int {
				cleaned = endpoint == d.Endpoint
				return 2
			}
			if got := d.Stop(slog.New(slog.DiscardHandler), 5*time.Second, clean); got != tc.stopLeaks || cleaned != tc.cleaned {
				t.Errorf("Stop = %d (cleaned %v), want %d (%v)", got, cleaned, tc.stopLeaks, tc.cleaned)
			}
			if d.cmd != nil && d.cmd.ProcessState == nil {
				t.Errorf("pid %d not reaped after Stop", d.Pid())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, tc := range []struct{ bin, flag, want string }{
		{"/bin/echo", "v1\n", "v1"},
		{"/nonexistent/berth", "--version", ""},
	} {
		if got := Version(tc.bin, tc.flag); got != tc.want {
			t.Errorf("Version(%s %q) = %q, want %q", tc.bin, tc.flag, got, tc.want)
		}
	}
}
