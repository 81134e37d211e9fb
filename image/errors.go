package image

import "errors"

// Errors that callers map to CRI status codes. Every error returned by the
// package wraps at most one of them, together with the image it concerns.
var (
	// ErrInvalidReference: the reference cannot be parsed.
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrNotFound: no such image here, or no such tag or digest in the registry.
	ErrNotFound = errors.New("image not found")
	// ErrUnauthorized: the registry refused the credentials, or asked for some.
	ErrUnauthorized = errors.New("registry refused the credentials")
	// ErrStalled: a registry sent nothing for longer than the stall timeout.
	ErrStalled = errors.New("registry stalled")
	// ErrInvalidArchive: an image archive given to Import is malformed,
	// inconsistent or hostile.
	ErrInvalidArchive = errors.New("invalid image archive")
	// ErrAlreadyExists: a tag names another image and the caller did not
	// ask to move it.
	ErrAlreadyExists = errors.New("image tag already exists")
)
