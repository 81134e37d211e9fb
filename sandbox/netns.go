package sandbox

import (
	"context"
	"fmt"
)

// NetNS is where a ready pod's network namespace is pinned, for port
// forwarding; "" for a pod on the host's network.
func (m *Manager) NetNS(ctx context.Context, id string) (string, error) {
	p, err := m.lookup(id)
	if err != nil {
		return "", err
	}
	rec, cfg := p.snapshot()
	if rec.State != StateReady {
		return "", fmt.Errorf("pod sandbox %s is not ready", rec.ID)
	}
	if hostNet, _, _ := namespaces(cfg); hostNet {
		return "", nil
	}
	if rec.NetNS == "" {
		return "", fmt.Errorf("pod sandbox %s has no network namespace", rec.ID)
	}
	return rec.NetNS, nil
}
