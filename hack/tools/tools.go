//go:build tools

// Package tools anchors the dependencies of critest, which is a test binary
// (sigs.k8s.io/cri-tools/cmd/critest has only _test.go files and so cannot be a
// `tool` directive). crictl, ginkgo and the registry are `tool` directives in
// go.mod. hack/install-tools builds all of them.
package tools

import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/cri-tools/pkg/benchmark"
	_ "sigs.k8s.io/cri-tools/pkg/common"
	_ "sigs.k8s.io/cri-tools/pkg/framework"
	_ "sigs.k8s.io/cri-tools/pkg/validate"
)
