package heavylock

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

func TestTake(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	unlock, err := Take(context.Background(), "", log)
	if err != nil {
		t.Fatalf("no lock: %v", err)
	}
	unlock()

	path := filepath.Join(t.TempDir(), "lock")
	unlock, err = Take(context.Background(), path, log)
	if err != nil {
		t.Fatal(err)
	}
	// Held: a second taker waits until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Take(ctx, path, log); err != context.DeadlineExceeded {
		t.Fatalf("second Take while held = %v, want %v", err, context.DeadlineExceeded)
	}
	unlock()
	again, err := Take(context.Background(), path, log)
	if err != nil {
		t.Fatalf("Take after unlock: %v", err)
	}
	again()
}
