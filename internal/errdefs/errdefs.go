// Package errdefs classes berth's errors by what the caller can do about
// them. A behaviour package makes its sentinel errors with New (or marks
// an error with Wrap), so that its callers keep testing them with
// errors.Is while the edges (the CRI server, the admin API) answer every
// error from one table, by class, without knowing whose error it is.
package errdefs

import (
	"context"
	"errors"
	"net/http"
	"syscall"

	"google.golang.org/grpc/codes"
)

// Class is a kind of failure. A class is an error itself:
// errors.Is(err, ErrNotFound) holds for every error of class ErrNotFound.
type Class struct{ name string }

func (c *Class) Error() string { return c.name }

// The classes berth's errors fall in.
var (
	ErrInvalidArgument    = &Class{"invalid argument"}
	ErrNotFound           = &Class{"not found"}
	ErrAlreadyExists      = &Class{"already exists"}
	ErrFailedPrecondition = &Class{"failed precondition"}
	ErrUnauthenticated    = &Class{"unauthenticated"}
	ErrDeadlineExceeded   = &Class{"deadline exceeded"}
	ErrCanceled           = &Class{"canceled"}
	ErrResourceExhausted  = &Class{"resource exhausted"}
)

// New is a sentinel error saying text, of class c.
func New(text string, c *Class) error { return &classed{text: text, class: c} }

type classed struct {
	text  string
	class *Class
}

func (e *classed) Error() string        { return e.text }
func (e *classed) Is(target error) bool { return target == e.class }

// Wrap is err, also of class c; nil if err is nil.
func Wrap(err error, c *Class) error {
	if err == nil {
		return nil
	}
	return &wrapped{err: err, class: c}
}

type wrapped struct {
	err   error
	class *Class
}

func (e *wrapped) Error() string        { return e.err.Error() }
func (e *wrapped) Unwrap() error        { return e.err }
func (e *wrapped) Is(target error) bool { return target == e.class }

// edge is the one table from classes to what the edges answer. Its order
// decides for an error of several classes: what a package said of its
// own error (missing, invalid, taken, in the wrong state) comes before a
// deadline or a cancellation that ended the undo of its call. also lists
// the standard errors of the class, which carry no class of their own.
var edge = []struct {
	class *Class
	also  []error
	grpc  codes.Code
	http  int
}{
	{ErrNotFound, nil, codes.NotFound, http.StatusNotFound},
	{ErrInvalidArgument, nil, codes.InvalidArgument, http.StatusBadRequest},
	{ErrAlreadyExists, nil, codes.AlreadyExists, http.StatusConflict},
	{ErrFailedPrecondition, nil, codes.FailedPrecondition, http.StatusPreconditionFailed},
	{ErrUnauthenticated, nil, codes.Unauthenticated, http.StatusUnauthorized},
	{ErrDeadlineExceeded, []error{context.DeadlineExceeded}, codes.DeadlineExceeded, http.StatusGatewayTimeout},
	// 499: the client went away (nginx's code); nobody reads the answer.
	{ErrCanceled, []error{context.Canceled}, codes.Canceled, 499},
	// A full disk or quota: a caller can tell it from the runtime's own
	// fault without parsing the text (gRPC's own example of the code).
	{ErrResourceExhausted, []error{syscall.ENOSPC, syscall.EDQUOT}, codes.ResourceExhausted, http.StatusInsufficientStorage},
}

// Of is the class of err, nil for an error of none (the runtime's own
// failure: a CNI plugin's, the kernel's).
func Of(err error) *Class {
	if i := find(err); i >= 0 {
		return edge[i].class
	}
	return nil
}

func find(err error) int {
	if err == nil {
		return -1
	}
	for i, e := range edge {
		if errors.Is(err, e.class) {
			return i
		}
		for _, a := range e.also {
			if errors.Is(err, a) {
				return i
			}
		}
	}
	return -1
}

// GRPCCode is the gRPC code that answers err: OK for nil, Unknown for an
// error of no class, as other CRI runtimes report their own failures.
func GRPCCode(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if i := find(err); i >= 0 {
		return edge[i].grpc
	}
	return codes.Unknown
}

// HTTPStatus is the HTTP status that answers err: 200 for nil, 500 for an
// error of no class.
func HTTPStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	if i := find(err); i >= 0 {
		return edge[i].http
	}
	return http.StatusInternalServerError
}
