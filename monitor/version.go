package monitor

import (
	"errors"
	"fmt"
)

// A monitor outlives the berth that started it: after an upgrade (or a
// downgrade) berth meets monitors a berth of another commit started, and
// both sides must tell whether they can talk before anything is done.
// Every request carries the version berth speaks and every response the
// version the monitor speaks; a side that cannot serve the other's says so
// (CodeVersion, ErrVersion) without acting on the call.
const (
	// ProtocolVersion is the version this side speaks.
	ProtocolVersion = 1
	// MinProtocolVersion is the oldest version this side still serves.
	// A message without a version is version 1: what monitors spoke before
	// the protocol carried one.
	MinProtocolVersion = 1
)

// CodeVersion: the monitor does not serve the request's version.
const CodeVersion = "version"

// ErrVersion wraps every failure to talk to a monitor because one side
// does not serve the other's protocol version. The monitor and what it
// runs are alive: a berth that serves its version can take it over.
var ErrVersion = errors.New("monitor protocol version not served")

// VersionError says which versions met.
type VersionError struct {
	Socket string
	// Monitor is the monitor's version, 0 if it did not say (it refused
	// the request's version).
	Monitor int
	// Msg is the monitor's own refusal, if it refused.
	Msg string
}

func (e *VersionError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("monitor %s: %s (this berth speaks protocol version %d)", e.Socket, e.Msg, ProtocolVersion)
	}
	return fmt.Sprintf("monitor %s speaks protocol version %d; this berth serves versions %d to %d", e.Socket, e.Monitor, MinProtocolVersion, ProtocolVersion)
}

func (e *VersionError) Unwrap() error { return ErrVersion }

// Served tells whether this side serves version v (0: unversioned, 1).
func Served(v int) bool {
	if v == 0 {
		v = 1
	}
	return v >= MinProtocolVersion && v <= ProtocolVersion
}

// stamp sets the version berth speaks on a request about to be sent.
func stamp(req *Request) {
	if req.Version == 0 {
		req.Version = ProtocolVersion
	}
}

// checkResponse turns a response into the call's error, nil on success:
// a version this berth cannot serve first (whatever else it says, it was
// not written by a monitor this berth understands), then the monitor's
// own error.
func (c *Client) checkResponse(resp *Response) error {
	if resp.Code == CodeVersion {
		return &VersionError{Socket: c.Socket, Monitor: resp.Version, Msg: resp.Error}
	}
	if !Served(resp.Version) {
		return &VersionError{Socket: c.Socket, Monitor: resp.Version}
	}
	if resp.Error != "" {
		return &Error{Code: resp.Code, Msg: resp.Error}
	}
	return nil
}
