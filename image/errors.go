package image

import (
	"errors"

	"github.com/berth-runtime/berth/internal/errdefs"
)

// Errors of the image service, of an errdefs class but ErrStalled. Every
// error returned by the package wraps at most one of them, together with
// the image it concerns.
var (
	// ErrInvalidReference: the reference cannot be parsed.
	ErrInvalidReference = errdefs.New("invalid image reference", errdefs.ErrInvalidArgument)
	// ErrNotFound: no such image here, or no such tag or digest in the registry.
	ErrNotFound = errdefs.New("image not found", errdefs.ErrNotFound)
	// ErrUnauthorized: the registry refused the credentials, or asked for some.
	ErrUnauthorized = errdefs.New("registry refused the credentials", errdefs.ErrUnauthenticated)
	// ErrStalled: a registry sent nothing for longer than the stall timeout.
	ErrStalled = errors.New("registry stalled")
	// ErrInvalidArchive: an image archive given to Import is malformed,
	// inconsistent or hostile.
	ErrInvalidArchive = errdefs.New("invalid image archive", errdefs.ErrInvalidArgument)
	// ErrAlreadyExists: a tag names another image and the caller did not
	// ask to move it.
	ErrAlreadyExists = errdefs.New("image tag already exists", errdefs.ErrAlreadyExists)
)
