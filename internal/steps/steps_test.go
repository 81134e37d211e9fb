package steps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/berth-runtime/berth/internal/faultpoint"
)

func TestRun(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		fail    string // the step that fails
		errText string // the error's, "" for none
		ran     []string
		spans   []string
	}{
		{name: "all", ran: []string{"one", "two", "three"}, spans: []string{"one span", "three span"}},
		{name: "second fails", fail: "two", errText: "pod p1: boom", ran: []string{"one", "two"}, spans: []string{"one span"}},
		{name: "third fails, naming the pod", fail: "three", errText: "pod p1 is gone", ran: []string{"one", "two", "three"}, spans: []string{"one span", "three span"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tracer := trace.NewTracerProvider(trace.WithSpanProcessor(rec)).Tracer("test")
			r := &Runner{Kind: "pod", ID: "p1", Tracer: tracer}
			var ran []string
			step := func(name, span string) Step {
				return Step{Name: name, Span: span, Do: func(context.Context) error {
					ran = append(ran, name)
					switch {
					case name != tt.fail:
						return nil
					case name == "three":
						return errors.New("pod p1 is gone")
					}
					return fmt.Errorf("%w", errBoom)
				}}
			}
			err := r.Run(context.Background(),
				step("one", "one span"), step("two", ""), Step{Name: "skipped", Skip: true}, step("three", "three span"))
			if got := fmt.Sprint(err); tt.errText == "" && err != nil || tt.errText != "" && got != tt.errText {
				t.Errorf("error %v, want %q", err, tt.errText)
			}
			if tt.fail == "two" && !errors.Is(err, errBoom) {
				t.Errorf("%v does not wrap the step's error", err)
			}
			if !slices.Equal(ran, tt.ran) {
				t.Errorf("ran %v, want %v", ran, tt.ran)
			}
			var spans []string
			for _, s := range rec.Ended() {
				spans = append(spans, s.Name())
			}
			if !slices.Equal(spans, tt.spans) {
				t.Errorf("spans %v, want %v", spans, tt.spans)
			}
		})
	}
}

func TestTimesAndFaults(t *testing.T) {
	slow := func(context.Context) error { time.Sleep(10 * time.Millisecond); return nil }
	failing := func(context.Context) error { return errors.New("no") }
	// A fault point is hit once its step is done, never for one that
	// failed.
	for point, want := range map[string]string{"Test/slow-done": "Test/slow-done c1\n", "Test/failing-done": ""} {
		marker := filepath.Join(t.TempDir(), "reached")
		for _, kv := range faultpoint.Env(point, marker, time.Millisecond) {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		r := &Runner{Kind: "container", ID: "c1", Faults: faultpoint.FromEnv(slog.New(slog.DiscardHandler))}
		err := r.Run(context.Background(),
			Step{Name: "slow", Fault: "Test/slow-done", Do: slow},
			Step{Span: "spanned only", Do: slow},
			Step{Name: "failing", Fault: "Test/failing-done", Do: failing})
		if err == nil || err.Error() != "container c1: no" {
			t.Errorf("error %v", err)
		}
		if r.Time("slow") < 10*time.Millisecond || r.Time("spanned only") < 10*time.Millisecond || r.Time("never") != 0 {
			t.Errorf("times: slow %v, spanned only %v, never %v", r.Time("slow"), r.Time("spanned only"), r.Time("never"))
		}
		if b, _ := os.ReadFile(marker); string(b) != want {
			t.Errorf("armed at %s: marker %q, want %q", point, b, want)
		}
	}
}

func TestName(t *testing.T) {
	for _, tc := range []struct {
		name, id string
		err      error
		want     string // "" for nil
	}{
		{name: "nil", id: "p1"},
		{name: "names it", id: "p1", err: errors.New("boom"), want: "pod p1: boom"},
		{name: "named already", id: "p1", err: errors.New("stop p1: boom"), want: "stop p1: boom"},
		{name: "no id", err: errors.New("boom"), want: "boom"},
		{name: "joined", id: "p1", err: errors.Join(errors.New("a"), errors.New("b")), want: "pod p1: a\nb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Name("pod", tc.id, tc.err)
			if got := fmt.Sprint(err); err == nil && tc.want != "" || err != nil && got != tc.want {
				t.Fatalf("Name = %v, want %q", err, tc.want)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("Name(%v) does not wrap it", tc.err)
			}
		})
	}
}
