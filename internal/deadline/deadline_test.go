package deadline

import (
	"context"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		name     string
		left     time.Duration // 0: no deadline
		min, max time.Duration
	}{
		{"no deadline", 0, time.Minute, time.Minute},
		{"10s: half a second kept", 10 * time.Second, 9400 * time.Millisecond, 9500 * time.Millisecond},
		{"1s: a fifth kept", time.Second, 700 * time.Millisecond, 800 * time.Millisecond},
		{"passed", -time.Second, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.left != 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.left)
				defer cancel()
			}
			if got := Budget(ctx, time.Minute); got < tc.min || got > tc.max {
				t.Errorf("Budget = %s, want %s..%s", got, tc.min, tc.max)
			}
		})
	}
}
