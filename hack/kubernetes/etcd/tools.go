//go:build tools

// Anchors etcd (the main package is the root of go.etcd.io/etcd/server/v3),
// so that `go mod tidy` keeps every module it needs.
package tools

import _ "go.etcd.io/etcd/server/v3"
