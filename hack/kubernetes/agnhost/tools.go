//go:build tools

// Anchors agnhost (a main package of k8s.io/kubernetes), so that `go mod tidy`
// keeps every module it needs.
package tools

import _ "k8s.io/kubernetes/test/images/agnhost"
