// Package deadline says how long a call may keep waiting for work that
// goes on without it (a CNI DEL, a filesystem operation, another call
// holding a lock) so that it still answers before its caller's deadline,
// with an error naming what it waited for, instead of being cut off by
// the caller with a bare "context deadline exceeded".
package deadline

import (
	"context"
	"time"
)

// maxMargin bounds what is kept back for the answer: a fifth of what is left, at most
// half a second.
const maxMargin = 500 * time.Millisecond

// Budget is how long a call under ctx may wait: until a little before its
// deadline; none when ctx has no deadline.
func Budget(ctx context.Context, none time.Duration) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return none
	}
	left := time.Until(dl)
	return max(left-min(left/5, maxMargin), 0)
}
