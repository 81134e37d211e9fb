package container

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestRunCleanups: a failed create's cleanups run last step first, every
// one even after a failure, and each failure is logged with the container
// and the step and returned.
func TestRunCleanups(t *testing.T) {
	tests := []struct {
		name     string
		fail     map[string]bool
		wantErr  []string
		wantLogs int
	}{
		{"all succeed", nil, nil, 0},
		{"one fails", map[string]bool{"release image lease": true}, []string{"release image lease: boom"}, 1},
		{"both fail", map[string]bool{"release image lease": true, "release image volume leases": true},
			[]string{"release image lease: boom", "release image volume leases: boom"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := &Service{log: slog.New(slog.NewTextHandler(&logs, nil))}
			var order []string
			step := func(name string) cleanup {
				return cleanup{name, func(context.Context) error {
					order = append(order, name)
					if tt.fail[name] {
						return errors.New("boom")
					}
					return nil
				}}
			}
			err := s.runCleanups(context.Background(), "c1", []cleanup{step("release image lease"), step("release image volume leases")})
			if got := strings.Join(order, ","); got != "release image volume leases,release image lease" {
				t.Errorf("order %s, want the last step first", got)
			}
			if (err == nil) != (len(tt.wantErr) == 0) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			lines := strings.Count(logs.String(), "level=WARN")
			if lines != tt.wantLogs || (lines > 0 && (!strings.Contains(logs.String(), "container=c1") || !strings.Contains(logs.String(), `step="release image`))) {
				t.Errorf("logs:\n%s\nwant %d warnings naming the container and step", logs.String(), tt.wantLogs)
			}
		})
	}
}
