package server

import (
	"context"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
)

// RunPodSandbox creates and starts a pod sandbox.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	if s.sandboxes == nil {
		return nil, errNoSandboxes
	}
	if err := s.checkPodSandbox(req.GetConfig(), req.GetRuntimeHandler()); err != nil {
		return nil, err
	}
	id, err := s.sandboxes.Run(ctx, req.GetConfig(), req.GetRuntimeHandler())
	if err != nil {
		return nil, rpcError(err)
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// checkPodSandbox refuses a pod config, and a handler for it, that
// berth cannot run (RunPodSandbox, RestorePod).
func (s *Server) checkPodSandbox(cfg *runtimeapi.PodSandboxConfig, handler string) error {
	if err := validatePodSandboxConfig(cfg); err != nil {
		return err
	}
	rt, ok := s.cfg.Handler(handler)
	if !ok {
		return invalidf("runtime_handler %q is not configured: this berth's handlers are %s (the config's [runtimes] tables)", handler, s.knownHandlers())
	}
	if u := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); u != nil && u.GetMode() == runtimeapi.NamespaceMode_POD {
		if !s.userns {
			return status.Error(codes.Unimplemented, "config.linux.security_context.namespace_options.userns_options: user namespaces are not supported by this berth (its log at start says why)")
		}
		if rt.DisableUserNamespaces {
			return status.Errorf(codes.Unimplemented, "config.linux.security_context.namespace_options.userns_options: runtime handler %q has user namespaces disabled (disable_user_namespaces)", handler)
		}
	}
	return nil
}

// knownHandlers names the handlers RunPodSandbox accepts, for its error.
func (s *Server) knownHandlers() string {
	names := s.handlerNames()
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	quoted[0] += " (the default, " + strconv.Quote(s.cfg.DefaultRuntime) + "'s settings)"
	return strings.Join(quoted, ", ")
}

func validatePodSandboxConfig(cfg *runtimeapi.PodSandboxConfig) error {
	md := cfg.GetMetadata()
	switch {
	case cfg == nil:
		return invalidf("config is required")
	case md == nil:
		return invalidf("config.metadata is required")
	case md.GetName() == "":
		return invalidf("config.metadata.name is required")
	case md.GetNamespace() == "":
		return invalidf("config.metadata.namespace is required")
	case md.GetUid() == "":
		return invalidf("config.metadata.uid is required")
	}
	// The metadata reaches CNI plugins as CNI_ARGS, "K=V;K=V" in their
	// environment: a ";" or "=" would add an argument of the pod's choosing
	// (host-local's IP=, another pod's address), a NUL fails every exec of
	// a plugin, DEL included, and the pod could never be removed.
	for field, v := range map[string]string{"name": md.GetName(), "namespace": md.GetNamespace(), "uid": md.GetUid()} {
		if i := strings.IndexFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f || r == ';' || r == '=' }); i >= 0 {
			return invalidf("config.metadata.%s: %q holds %q, which the pod's CNI arguments cannot carry", field, v, v[i])
		}
	}
	// The CRI: "run_as_group should only be specified when run_as_user is
	// specified; otherwise, the runtime MUST error."
	if sc := cfg.GetLinux().GetSecurityContext(); sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil {
		return invalidf("config.linux.security_context.run_as_group is set without run_as_user")
	}
	if _, err := spec.UserNamespace(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(), "config.linux.security_context.namespace_options"); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	for name, value := range cfg.GetLinux().GetSysctls() {
		// The kubelet's own syntax for sysctl names: pause is handed
		// NAME=VALUE, so a name holding "=", a space or a NUL would choose
		// another file or another argument (CRI-O's CVE-2022-0811 was a
		// separator in a value).
		if len(name) > 253 || !sysctlName.MatchString(name) {
			return invalidf("config.linux.sysctls: %q is not a sysctl name (lower-case segments of letters, digits, - and _, separated by . or /)", name)
		}
		if strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return invalidf("config.linux.sysctls: %s: value %q holds a control character", name, value)
		}
	}
	return nil
}

// sysctlName is the kubelet's pattern of a sysctl name (dots or slashes
// between segments).
var sysctlName = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`)
