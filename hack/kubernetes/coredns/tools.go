//go:build tools

// Anchors CoreDNS (its main package is the module root), so that `go mod tidy`
// keeps every module it needs.
package tools

import _ "github.com/coredns/coredns"
