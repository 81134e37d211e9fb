package network

import "context"

// Status implements Status: the NetworkReady condition, recomputed from
// the conf dir on every call.
func (c *CNI) Status(ctx context.Context) Condition {
	if err := c.Ready(ctx); err != nil {
		return Condition{Reason: ReasonNotReady, Message: "network plugin is not ready: " + err.Error()}
	}
	return Condition{Ready: true}
}
