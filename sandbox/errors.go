package sandbox

import "github.com/berth-runtime/berth/internal/errdefs"

// Errors of the sandbox service, each of an errdefs class.
var (
	ErrNotFound = errdefs.New("pod sandbox not found", errdefs.ErrNotFound)
	ErrInvalid  = errdefs.New("invalid pod sandbox config", errdefs.ErrInvalidArgument)
)
