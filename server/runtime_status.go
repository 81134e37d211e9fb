package server

import (
	"context"
	"errors"
	"sort"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Status reports the runtime and network conditions; the node is Ready
// only when both are true. It also reports what the runtime supports: the
// kubelet (and critest) turn features on from these, and skip what is not
// listed.
func (s *Server) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	net := s.network.Status(ctx)
	resp := &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: net.Ready, Reason: net.Reason, Message: net.Message},
		}},
		RuntimeHandlers: s.handlers(),
		// Containers follow SecurityContext.SupplementalGroupsPolicy (Merge
		// adds the groups /etc/group gives the user, Strict does not) and
		// report the identity they run with in ContainerStatus.User.
		Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true, MountOptions: true,
			// A pod in its own user namespace on the host's network
			// (KEP-5607): where the start-up probe found pods' user
			// namespaces work at all.
			UserNamespacesHostNetwork: s.userns},
	}
	if req.GetVerbose() {
		resp.Info = map[string]string{"config": s.configJSON}
	}
	return resp, nil
}

// handlers lists every handler RunPodSandbox accepts, "" (the default,
// with default_runtime's settings) first, then the configured ones by
// name, as containerd lists them. The features are the kernel's and the
// probe's, less what a handler's settings turn off.
func (s *Server) handlers() []*runtimeapi.RuntimeHandler {
	names := s.handlerNames()
	out := make([]*runtimeapi.RuntimeHandler, 0, len(names))
	for _, n := range names {
		rt, _ := s.cfg.Handler(n)
		out = append(out, &runtimeapi.RuntimeHandler{Name: n, Features: &runtimeapi.RuntimeHandlerFeatures{
			// Mount.recursive_read_only becomes libcontainer's "rro",
			// mount_setattr(2) with AT_RECURSIVE: only where the kernel has it.
			RecursiveReadOnlyMounts: s.rro && !rt.DisableRecursiveReadOnly,
			// Pods in their own user namespace (mode POD), with id-mapped
			// rootfs layers and volumes: where berth's start-up probe
			// found it all works.
			UserNamespaces: s.userns && !rt.DisableUserNamespaces,
		}})
	}
	return out
}

// handlerNames are "" and the configured handlers, sorted.
func (s *Server) handlerNames() []string {
	names := []string{""}
	for n := range s.cfg.Runtimes {
		names = append(names, n)
	}
	sort.Strings(names[1:])
	return names
}

// kernelHasMountSetattr tells whether mount_setattr(2) (Linux 5.12) exists:
// called on no file, it fails with EBADF (or EINVAL) where it does, ENOSYS
// where it does not.
func kernelHasMountSetattr() bool {
	err := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{})
	return !errors.Is(err, unix.ENOSYS)
}
