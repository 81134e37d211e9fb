# Sourced by every hack/ script: versions, and where slow-to-build things are cached.
# The cache lives outside the clone so that a fresh clone on the same machine reuses it.
BERTH_ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export BERTH_CACHE="${BERTH_CACHE:-/var/cache/berth-dev}"
export BERTH_OUTPUT="${BERTH_OUTPUT:-$BERTH_ROOT_DIR/_output}"

CRI_TOOLS_VERSION=v1.37.0
DISTRIBUTION_VERSION=v3.1.2
# The ginkgo CLI version cri-tools' go.mod uses (hack/tools/go.mod pins the same).
GINKGO_VERSION=v2.32.1
# The stock Kubernetes binaries the kubelet test runs berth under (hack/kubelet;
# the wrapper modules hack/kubernetes and hack/kubernetes/etcd pin the same).
KUBERNETES_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
# The CNI plugins are pinned by the main go.mod (tool directives).
CNI_PLUGINS_VERSION="$(cd "$BERTH_ROOT_DIR" && go list -m -f '{{.Version}}' github.com/containernetworking/plugins)"

export BERTH_BINARY="${BERTH_BINARY:-$BERTH_OUTPUT/bin/berth}"
export BERTH_CNI_BIN_DIR="${BERTH_CNI_BIN_DIR:-$BERTH_CACHE/cni-plugins-$CNI_PLUGINS_VERSION}"
export BERTH_CRICTL="${BERTH_CRICTL:-$BERTH_CACHE/cri-tools-$CRI_TOOLS_VERSION/crictl}"
export BERTH_CRITEST="${BERTH_CRITEST:-$BERTH_CACHE/cri-tools-$CRI_TOOLS_VERSION/critest}"
export BERTH_REGISTRY_BIN="${BERTH_REGISTRY_BIN:-$BERTH_CACHE/registry-$DISTRIBUTION_VERSION/registry}"
export BERTH_GINKGO="${BERTH_GINKGO:-$BERTH_CACHE/ginkgo-$GINKGO_VERSION/ginkgo}"
# kubelet, kube-apiserver, kubectl (hack/kubelet); test/kubelet skips without them.
export BERTH_KUBELET_DIR="${BERTH_KUBELET_DIR:-$BERTH_CACHE/kubernetes-$KUBERNETES_VERSION}"
export BERTH_ETCD="${BERTH_ETCD:-$BERTH_CACHE/etcd-$ETCD_VERSION/etcd}"
# kind, built from the Go module proxy by hack/kind (test/kind runs it).
KIND_VERSION=v0.33.0
export BERTH_KIND="${BERTH_KIND:-$BERTH_CACHE/kind-$KIND_VERSION/kind}"
# Test images (hack/build-images, test/images/mkimage): downloaded .debs, and one OCI
# layout per built image keyed by a hash of its inputs.
export BERTH_DEBS="${BERTH_DEBS:-$BERTH_CACHE/debs}"
export BERTH_IMAGES="${BERTH_IMAGES:-$BERTH_CACHE/images}"
export BERTH_MKIMAGE="${BERTH_MKIMAGE:-$BERTH_OUTPUT/bin/mkimage}"

# berth_arch ARCH points the cached binaries' paths at ARCH's own
# directories, cross-built beside the host's (hack/kind --arch arm64); for
# the host's architecture it changes nothing.
berth_arch() {
	[[ "$1" == "$(go env GOHOSTARCH)" ]] && return 0
	export BERTH_KUBELET_DIR="$BERTH_CACHE/kubernetes-$KUBERNETES_VERSION-linux-$1"
	export BERTH_ETCD="$BERTH_CACHE/etcd-$ETCD_VERSION-linux-$1/etcd"
	export BERTH_CNI_BIN_DIR="$BERTH_CACHE/cni-plugins-$CNI_PLUGINS_VERSION-linux-$1"
	export BERTH_CRICTL="$BERTH_CACHE/cri-tools-$CRI_TOOLS_VERSION-linux-$1/crictl"
}
