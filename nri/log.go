package nri

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	nrilog "github.com/containerd/nri/pkg/log"
)

// slogger sends the NRI library's log to berth's (it would otherwise go to
// logrus's default logger). The library's logger is a package variable,
// set once; which slog logger it writes to can change (tests make several
// NRIs, whose goroutines may still log).
type slogger struct{}

var (
	logTo   atomic.Pointer[slog.Logger]
	logOnce sync.Once
)

func setLogger(l *slog.Logger) {
	logTo.Store(l)
	logOnce.Do(func() { nrilog.Set(slogger{}) })
}

func (slogger) l() *slog.Logger { return logTo.Load() }

func (s slogger) Debugf(ctx context.Context, format string, args ...any) {
	s.l().DebugContext(ctx, fmt.Sprintf(format, args...))
}

func (s slogger) Infof(ctx context.Context, format string, args ...any) {
	s.l().InfoContext(ctx, fmt.Sprintf(format, args...))
}

func (s slogger) Warnf(ctx context.Context, format string, args ...any) {
	s.l().WarnContext(ctx, fmt.Sprintf(format, args...))
}

func (s slogger) Errorf(ctx context.Context, format string, args ...any) {
	s.l().ErrorContext(ctx, fmt.Sprintf(format, args...))
}
