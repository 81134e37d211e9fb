package sandbox

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nameKey is the pod's full CRI name: one sandbox per (name, namespace,
// uid, attempt). internal/reserve holds it while the pod exists.
func nameKey(m *runtimeapi.PodSandboxMetadata) string {
	return fmt.Sprintf("%s_%s_%s_%d", m.GetName(), m.GetNamespace(), m.GetUid(), m.GetAttempt())
}
