package network

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

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

// ConfDirStatus is ready once the CNI config directory holds a network
// config file. It only looks for the file; loading, validating and
// watching the configs with libcni is the CNI manager's job, which will
// replace it.
type ConfDirStatus struct {
	Dir string
}

// cniConfigExtensions are the file names libcni loads from a conf dir.
var cniConfigExtensions = []string{".conf", ".conflist", ".json"}

// Status implements Status.
func (s ConfDirStatus) Status(context.Context) Condition {
	entries, err := os.ReadDir(s.Dir)
	if err != nil && !os.IsNotExist(err) {
		return Condition{Reason: ReasonNotReady, Message: fmt.Sprintf("cannot read CNI config dir: %v", err)}
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		ext := filepath.Ext(e.Name())
		for _, want := range cniConfigExtensions {
			if ext == want {
				return Condition{Ready: true}
			}
		}
	}
	return Condition{Reason: ReasonNotReady, Message: fmt.Sprintf("network plugin is not ready: no CNI network config found in %s", s.Dir)}
}
