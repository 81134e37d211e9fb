// Package steps runs a call that makes an object (a pod, a container,
// the daemon itself) as a list of named steps. For each step it does, in
// one place, what every step of such a call needs: the stage a caller
// that gives up is told (reserve.Step), a tracing span, the crash tests'
// fault point once the step is done, and its duration; and it names the
// object in the error of a step that does not.
package steps

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/internal/tracing"
)

// Step is one step of a call. Every field but Do may be left empty.
type Step struct {
	// Name is the stage a caller that gives up while the step runs is
	// told, and the name of its duration; empty, the stage stays that
	// of the step before.
	Name string
	// Span names the step's tracing span.
	Span string
	// Fault is the fault point hit once the step has succeeded.
	Fault string
	// Skip leaves the step out (one that does not apply to this call).
	Skip bool
	Do   func(ctx context.Context) error
}

// Runner runs the steps of a call on one object. Its methods may be
// called from several goroutines (a step that runs beside others).
type Runner struct {
	// Kind and ID name the object ("pod", its id) in errors.
	Kind, ID string
	// Tracer makes the spans; nil, there are none.
	Tracer trace.Tracer
	Faults *faultpoint.Point

	mu    sync.Mutex
	times map[string]time.Duration
}

// Run runs steps in order and stops at the first that fails, returning
// its error.
func (r *Runner) Run(ctx context.Context, steps ...Step) error {
	for _, s := range steps {
		if err := r.Do(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// Do runs one step.
func (r *Runner) Do(ctx context.Context, s Step) error {
	if s.Skip {
		return nil
	}
	if s.Name != "" {
		reserve.Step(ctx, s.Name)
	}
	start := time.Now()
	var err error
	if s.Span != "" && r.Tracer != nil {
		err = tracing.Step(ctx, r.Tracer, s.Span, s.Do)
	} else {
		err = s.Do(ctx)
	}
	if name := s.Name; name != "" || s.Span != "" {
		if name == "" {
			name = s.Span
		}
		r.mu.Lock()
		if r.times == nil {
			r.times = make(map[string]time.Duration)
		}
		r.times[name] = time.Since(start)
		r.mu.Unlock()
	}
	if err != nil {
		return r.Err(err)
	}
	if s.Fault != "" {
		r.Faults.Hit(s.Fault, r.ID)
	}
	return nil
}

// Err is err naming the object, unless it already does; nil if err is.
func (r *Runner) Err(err error) error {
	return Name(r.Kind, r.ID, err)
}

// Name is err naming the object kind id ("pod", its id) unless it already
// does, for a call that is no list of steps; nil if err is.
func Name(kind, id string, err error) error {
	if err == nil || id == "" || strings.Contains(err.Error(), id) {
		return err
	}
	return fmt.Errorf("%s %s: %w", kind, id, err)
}

// Time is how long the step named name (by its Name, or else its Span)
// took, 0 if it did not run.
func (r *Runner) Time(name string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.times[name]
}
