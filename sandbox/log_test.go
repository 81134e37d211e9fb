package sandbox

import (
	"io"
	"log/slog"
	"os"
)

func testLogger(t interface{ Helper() }) *slog.Logger {
	if os.Getenv("BERTH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
