//go:build tools

// Anchors sample-apiserver (a main package at its module's root), so that
// `go mod tidy` keeps every module it needs.
package tools

import _ "k8s.io/sample-apiserver"
