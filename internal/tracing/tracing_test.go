package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		enabled bool
		records bool // a root span (no parent) is recorded
		wantErr string
	}{
		{name: "off", opts: Options{Endpoint: "nonsense"}},
		{name: "on, every trace", opts: Options{Enable: true, Endpoint: "127.0.0.1:4317", SamplingRatePerMillion: MaxSamplingRatePerMillion}, enabled: true, records: true},
		{name: "on, remote", opts: Options{Enable: true, Endpoint: "collector.example:4317"}, enabled: true},
		{name: "bad endpoint", opts: Options{Enable: true, Endpoint: "collector"}, wantErr: `endpoint "collector": want host:port`},
		{name: "rate over a million", opts: Options{Enable: true, Endpoint: "127.0.0.1:4317", SamplingRatePerMillion: 1_000_001}, wantErr: "sampling rate 1000001 per million"},
		{name: "negative rate", opts: Options{Enable: true, Endpoint: "127.0.0.1:4317", SamplingRatePerMillion: -1}, wantErr: "sampling rate -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(context.Background(), tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			if p.Enabled() != tt.enabled || (len(p.ServerOptions()) > 0) != tt.enabled {
				t.Errorf("Enabled %v, %d server options; want enabled %v", p.Enabled(), len(p.ServerOptions()), tt.enabled)
			}
			_, span := p.Tracer().Start(context.Background(), "x")
			if span.IsRecording() != tt.records {
				t.Errorf("a root span records: %v, want %v (sampling %d)", span.IsRecording(), tt.records, tt.opts.SamplingRatePerMillion)
			}
			End(span, errors.New("boom"))
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "localhost": true,
		"10.0.0.1": false, "collector": false, "": false,
	} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

// BenchmarkStepOff is what a traced step costs with tracing off: a span
// from the no-op tracer, ended (docs/tracing.md).
func BenchmarkStepOff(b *testing.B) {
	tr := Off().Tracer()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, span := tr.Start(ctx, "netns create")
		End(span, nil)
	}
}
