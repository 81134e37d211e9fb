// Package kind runs a real kind cluster whose nodes run berth in
// containerd's place: one control plane and two workers made by kind from
// berth's node image (hack/kind), bootstrapped by kubeadm, with flannel
// routing between the nodes. It checks what a cluster user does with it
// (Deployments, Services and DNS, kubectl's streaming commands, kind load,
// image GC, a 19-spec subset of Kubernetes Conformance that
// hack/kind-conformance runs) and what the node runtime must survive (a
// paused control plane, berth killed, a node restarted), then that `kind
// delete cluster` leaves nothing behind.
//
// Environment (hack/test sets it; the test skips, saying why, without it):
//
//	BERTH_KIND           the kind binary (v0.33.0, hack/kind builds it)
//	BERTH_KIND_IMAGE     the berth node image tag (hack/kind prints it)
//	BERTH_TEST_REGISTRY  the local registry the workloads' busybox and the
//	                     e2e images come from (hack/registry --e2e)
//	BERTH_KUBELET_DIR    kubectl, e2e.test and ginkgo (hack/kubelet)
//	DOCKER_HOST          the dockerd hack/dockerd started, if not the default
package kind
