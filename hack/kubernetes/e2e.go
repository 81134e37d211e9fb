//go:build tools

// Anchors the Kubernetes test binaries hack/e2e-binaries builds: the node
// e2e suite (e2e_node.test), the cluster e2e suite (e2e.test) and the
// ginkgo CLI of the ginkgo version they link. Their test-only requirements
// (ginkgo, gomega, testify, CDI specs ...) are reached only from _test.go
// files of k8s.io/kubernetes, which `go mod tidy` does not follow in a
// dependency; importing the suites' non-test packages and the CLI keeps them.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/e2e_node"
)
