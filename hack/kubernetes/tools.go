//go:build tools

// Anchors the Kubernetes commands hack/kubelet builds, so that `go mod tidy`
// keeps every module they need.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
