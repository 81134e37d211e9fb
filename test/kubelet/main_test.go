// Package kubelet_test runs the stock kubelet (Kubernetes v1.37, built by
// hack/kubelet) against a real berth daemon and checks what users see:
// first a standalone kubelet with static pods, then a one-node cluster
// with etcd and kube-apiserver, driven with kubectl.
//
// The kubelet changes the host; every test undoes each change and checks
// that it did (host.go). Kubelet tests on one machine take turns through
// a lock file, as the kubelet's device-plugin directory and the kernel
// settings it writes are machine-wide.
//
// Needs root, $BERTH_TEST_REGISTRY (hack/registry) and the Kubernetes
// binaries ($BERTH_KUBELET_DIR, $BERTH_ETCD: hack/kubelet); skips without
// them.
package kubelet_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
