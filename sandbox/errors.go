package sandbox

import "errors"

// Errors the server maps to gRPC codes.
var (
	ErrNotFound = errors.New("pod sandbox not found")
	ErrInvalid  = errors.New("invalid pod sandbox config")
)
