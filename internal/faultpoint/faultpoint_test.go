package faultpoint

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestUnarmedDoesNothing(t *testing.T) {
	t.Setenv(EnvPoint, "")
	p := FromEnv(slog.Default())
	if p != nil {
		t.Fatalf("FromEnv with no point set = %+v, want nil", p)
	}
	p.Hit(RunRecorded, "pod") // must return
}

func TestArmedHangsAtItsStepOnly(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "reached")
	t.Setenv(EnvPoint, CreateRootfs)
	t.Setenv(EnvFile, marker)
	p := FromEnv(slog.Default())

	p.Hit(CreateRecorded, "c1") // another step: returns
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a step that is not armed created the marker")
	}

	returned := make(chan struct{})
	go func() {
		p.Hit(CreateRootfs, "c1")
		close(returned)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(marker)
		if err == nil {
			if got := string(b); !strings.Contains(got, CreateRootfs) || !strings.Contains(got, "c1") {
				t.Errorf("marker holds %q, want the step and the object", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the armed step did not create the marker")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-returned:
		t.Fatal("Hit returned at the armed step")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestAllNamesAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range All() {
		if seen[n] || !strings.Contains(n, "/") {
			t.Errorf("step %q: duplicate or not <call>/<step>", n)
		}
		seen[n] = true
	}
}

func TestDelayWaitsThenReturns(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "reached")
	t.Setenv(EnvPoint, CreateRootfs)
	t.Setenv(EnvFile, marker)
	t.Setenv(EnvDelay, "50ms")
	p := FromEnv(slog.Default())
	start := time.Now()
	p.Hit(CreateRootfs, "c1")
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("armed step with a delay returned after %s", took)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("no marker: %v", err)
	}
	t.Setenv(EnvDelay, "soon")
	if p := FromEnv(slog.Default()); p.delay != 0 {
		t.Errorf("a delay that does not parse gave %s, want the hang", p.delay)
	}
}

// Env is what FromEnv reads back.
func TestEnvArmsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{
		{"hang", 0},
		{"delay", 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvDelay, "")
			for _, kv := range Env(StopContainers, "/tmp/marker", tc.delay) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			p := FromEnv(slog.Default())
			if p == nil || p.name != StopContainers || p.marker != "/tmp/marker" || p.delay != tc.delay {
				t.Errorf("FromEnv after Env = %+v, want point %s, marker /tmp/marker, delay %s", p, StopContainers, tc.delay)
			}
		})
	}
}
