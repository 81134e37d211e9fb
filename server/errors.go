package server

import (
	"errors"

	"google.golang.org/grpc/status"

	"github.com/berth-runtime/berth/internal/errdefs"
	"github.com/berth-runtime/berth/monitor"
)

// rpcError answers err with the gRPC code of its class (errdefs' table),
// whichever service it comes from.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, monitor.ErrVersion) {
		// The pod's monitor runs, in a protocol this berth does not
		// speak. Its client's errors carry no class: this one's is said
		// here.
		err = errdefs.Wrap(err, errdefs.ErrFailedPrecondition)
	}
	return status.Error(errdefs.GRPCCode(err), err.Error())
}
