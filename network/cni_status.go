package network

import "context"

// ReasonNotReady is the CRI NetworkReady condition reason while no usable
// CNI network exists; the kubelet shows it on the node.
const ReasonNotReady = "NetworkPluginNotReady"

// Condition is the network half of the CRI Status answer.
type Condition struct {
	Ready   bool
	Reason  string // CamelCase, empty when Ready
	Message string
}

// Status reports whether pods can get a network.
type Status interface {
	Status(ctx context.Context) Condition
}

// Status implements Status: the NetworkReady condition, recomputed from
// the conf dir on every call.
func (c *CNI) Status(ctx context.Context) Condition {
	if err := c.Ready(ctx); err != nil {
		return Condition{Reason: ReasonNotReady, Message: "network plugin is not ready: " + err.Error()}
	}
	return Condition{Ready: true}
}
