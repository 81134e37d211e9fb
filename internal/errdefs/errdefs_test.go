package errdefs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestClasses(t *testing.T) {
	errGone := New("pod sandbox not found", ErrNotFound)
	errBad := New("invalid image reference", ErrInvalidArgument)
	errStuck := New("process stuck", ErrDeadlineExceeded)
	tests := []struct {
		name  string
		err   error
		class *Class
		grpc  codes.Code
		http  int
	}{
		{"nil", nil, nil, codes.OK, http.StatusOK},
		{"sentinel", errGone, ErrNotFound, codes.NotFound, http.StatusNotFound},
		{"wrapped sentinel", fmt.Errorf("pod x: %w", errGone), ErrNotFound, codes.NotFound, http.StatusNotFound},
		{"invalid", fmt.Errorf("pull x: %w", errBad), ErrInvalidArgument, codes.InvalidArgument, http.StatusBadRequest},
		{"marked", Wrap(errors.New("name is reserved"), ErrAlreadyExists), ErrAlreadyExists, codes.AlreadyExists, http.StatusConflict},
		{"precondition", New("failed precondition", ErrFailedPrecondition), ErrFailedPrecondition, codes.FailedPrecondition, http.StatusPreconditionFailed},
		{"unauthenticated", New("registry refused the credentials", ErrUnauthenticated), ErrUnauthenticated, codes.Unauthenticated, http.StatusUnauthorized},
		{"own deadline", fmt.Errorf("pid 7: %w", errStuck), ErrDeadlineExceeded, codes.DeadlineExceeded, http.StatusGatewayTimeout},
		{"context deadline", fmt.Errorf("pod x: %w", context.DeadlineExceeded), ErrDeadlineExceeded, codes.DeadlineExceeded, http.StatusGatewayTimeout},
		{"canceled", fmt.Errorf("pull x: %w", context.Canceled), ErrCanceled, codes.Canceled, 499},
		{"disk full", fmt.Errorf("write y: %w", syscall.ENOSPC), ErrResourceExhausted, codes.ResourceExhausted, http.StatusInsufficientStorage},
		{"quota", fmt.Errorf("write y: %w", syscall.EDQUOT), ErrResourceExhausted, codes.ResourceExhausted, http.StatusInsufficientStorage},
		{"no class", errors.New("plugin failed"), nil, codes.Unknown, http.StatusInternalServerError},
		// The package's word on its own error wins over the deadline
		// that cut its undo short.
		{"class before deadline", fmt.Errorf("%w; undo: %w", errBad, context.DeadlineExceeded), ErrInvalidArgument, codes.InvalidArgument, http.StatusBadRequest},
		{"not found before invalid", fmt.Errorf("%w: target: %w", errBad, errGone), ErrNotFound, codes.NotFound, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Of(tt.err); got != tt.class {
				t.Errorf("Of = %v, want %v", got, tt.class)
			}
			if got := GRPCCode(tt.err); got != tt.grpc {
				t.Errorf("GRPCCode = %v, want %v", got, tt.grpc)
			}
			if got := HTTPStatus(tt.err); got != tt.http {
				t.Errorf("HTTPStatus = %d, want %d", got, tt.http)
			}
		})
	}
}

func TestSentinelsStayDistinct(t *testing.T) {
	a := New("not found", ErrNotFound)
	b := New("not found", ErrNotFound)
	err := fmt.Errorf("container x: %w", a)
	if !errors.Is(err, a) || errors.Is(err, b) || !errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is: own sentinel %v, other %v, class %v", errors.Is(err, a), errors.Is(err, b), errors.Is(err, ErrNotFound))
	}
	if err.Error() != "container x: not found" {
		t.Errorf("text %q", err)
	}
	w := Wrap(err, ErrFailedPrecondition)
	if w.Error() != err.Error() || !errors.Is(w, a) || !errors.Is(w, ErrFailedPrecondition) {
		t.Errorf("Wrap: %q, keeps sentinel %v", w, errors.Is(w, a))
	}
	if Wrap(nil, ErrNotFound) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}
