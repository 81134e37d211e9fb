package sandbox

import (
	"fmt"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nameKey is the pod's full CRI name: one sandbox per (name, namespace,
// uid, attempt).
func nameKey(m *runtimeapi.PodSandboxMetadata) string {
	return fmt.Sprintf("%s_%s_%s_%d", m.GetName(), m.GetNamespace(), m.GetUid(), m.GetAttempt())
}

// reservation is one claim on a pod name. done is closed when the
// RunPodSandbox that made it has finished: then id is the pod, or err why
// there is none (and the claim is gone).
type reservation struct {
	done chan struct{}
	id   string
	err  error
}

// names implements the retry rule: a RunPodSandbox that finds its name
// taken by a call still at work waits for that call, and one that finds it
// taken by a finished call gets that pod. A kubelet that timed out and
// retried so gets the sandbox it asked for the first time, instead of a
// "name is reserved" error until the first pod is removed.
type names struct {
	mu sync.Mutex
	m  map[string]*reservation
}

func newNames() *names { return &names{m: map[string]*reservation{}} }

// claim returns the reservation for key and whether the caller made it
// (and so must finish it).
func (n *names) claim(key string) (*reservation, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r, ok := n.m[key]; ok {
		return r, false
	}
	r := &reservation{done: make(chan struct{})}
	n.m[key] = r
	return r, true
}

// finish ends the caller's claim: with a pod it stays until release, with
// an error the name is free again.
func (n *names) finish(key string, r *reservation, id string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r.id, r.err = id, err
	if err != nil && n.m[key] == r {
		delete(n.m, key)
	}
	close(r.done)
}

// restore records a pod loaded at start as a finished claim.
func (n *names) restore(key, id string) {
	r := &reservation{done: make(chan struct{}), id: id}
	close(r.done)
	n.mu.Lock()
	n.m[key] = r
	n.mu.Unlock()
}

// release frees key if pod id still holds it.
func (n *names) release(key, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r, ok := n.m[key]; ok && r.id == id {
		select {
		case <-r.done:
			delete(n.m, key)
		default:
		}
	}
}
