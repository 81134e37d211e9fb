package runtimeharness

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestIsTempDir(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want bool
	}{
		{filepath.Join(os.TempDir(), "berth-node-e2e.123"), true},
		{"/tmp/berth-critest.1", true},
		{"/tmp", false},
		{"/", false},
		{"", false},
		{"/work", false},
		{"tmp/x", false},
		{"/tmp/x/..", false},
		{"/tmp/x/y", false},
	} {
		if got := isTempDir(tc.dir); got != tc.want {
			t.Errorf("isTempDir(%q) = %v, want %v", tc.dir, got, tc.want)
		}
	}
}

func TestRemoveWorkDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		temp bool // a dir made by os.MkdirTemp, or one elsewhere
		gone bool
	}{
		{"a run's temp dir", true, true},
		{"not a temp dir: kept", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dir string
			if tc.temp {
				d, err := os.MkdirTemp("", "runtimeharness-test.")
				if err != nil {
					t.Fatal(err)
				}
				dir = d
			} else {
				dir = filepath.Join(t.TempDir(), "work")
			}
			if err := os.MkdirAll(filepath.Join(dir, "state", "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			l := NewLeaks(slog.New(slog.DiscardHandler))
			l.RemoveWorkDir(dir)
			if _, err := os.Stat(dir); (err != nil) != tc.gone || l.Count() != 0 {
				t.Errorf("after RemoveWorkDir(%s): stat %v, leaks %d", dir, err, l.Count())
			}
		})
	}
}

func TestLeaksCount(t *testing.T) {
	l := NewLeaks(slog.New(slog.DiscardHandler))
	l.Add("a")
	l.AddLogged(2)
	l.KillProcs(nil)
	l.Unmount(nil, nil)
	if l.Count() != 3 {
		t.Errorf("Count = %d, want 3", l.Count())
	}
}

func TestIDsIn(t *testing.T) {
	id := func(c byte) string { return string(slices.Repeat([]byte{c}, 64)) }
	dir := t.TempDir()
	logPath := filepath.Join(dir, "runtime.log")
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(state, "pods", id('a')), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("created pod="+id('b')+" short=abc123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, log, dir string
		want           []string
	}{
		{"log and state", logPath, state, []string{id('a'), id('b')}},
		{"log only", logPath, "", []string{id('b')}},
		{"nothing there", filepath.Join(dir, "none.log"), filepath.Join(dir, "none"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(IDsIn(tc.log, tc.dir)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("IDsIn = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLineNaming(t *testing.T) {
	const addrs = "1: lo    inet 127.0.0.1/8 scope host lo\n5: br0    inet 10.219.255.1/32 scope global br0\n"
	for _, tc := range []struct{ out, prefix, want string }{
		{addrs, "10.219.", "5: br0    inet 10.219.255.1/32 scope global br0"},
		{addrs, "10.216.", ""},
		{"10.216.0.0/22 dev bdens0 proto kernel\n", "10.216.", "10.216.0.0/22 dev bdens0 proto kernel"},
		{"default via 110.216.0.1 dev eth0\n", "10.216.", ""},
	} {
		if got := lineNaming(tc.out, tc.prefix); got != tc.want {
			t.Errorf("lineNaming(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}

func TestKubeletHostCreated(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &KubeletHost{dirs: []string{dir}, entries: walk([]string{dir})}
	for _, p := range []string{"new/a/b", "old/c"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{filepath.Join(dir, "new/a/b"), filepath.Join(dir, "new/a"), filepath.Join(dir, "old/c"), filepath.Join(dir, "new")}
	got := h.created()
	// Deepest first; among equals, any order.
	if len(got) != len(want) || got[0] != want[0] || !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Errorf("created = %v, want %v (deepest first)", got, want)
	}
}
