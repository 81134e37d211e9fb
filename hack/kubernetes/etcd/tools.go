//go:build tools

// Anchors etcd (the main package is the root of go.etcd.io/etcd/server/v3)
// and etcdctl (the kind node's etcd image has both), so that `go mod tidy`
// keeps every module they need.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
