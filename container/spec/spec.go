// Package spec turns a CRI container request into an OCI runtime spec.
//
// Build is a pure function of its Input: everything it needs from the host
// (devices, mount propagation, files) and from the container's root
// filesystem (/etc/passwd, /etc/group) comes through small interfaces, so
// that table tests and fuzzing run without root, mounts or a real image.
package spec

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
)

// ImageConfig is the part of an image's configuration that shapes a
// container (OCI image-spec ImageConfig / go-containerregistry v1.Config).
type ImageConfig struct {
	User       string   `json:"user,omitempty"`
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	StopSignal string   `json:"stop_signal,omitempty"`
}

// Pod is what the pod sandbox provides to its containers.
type Pod struct {
	ID     string
	Config *runtimeapi.PodSandboxConfig
	// NetNSPath is the pinned network namespace; empty for host network.
	NetNSPath string
	// PausePID holds the pod's IPC and UTS namespaces (and its PID
	// namespace when the pod shares one).
	PausePID int
	// CgroupParent is the cgroup under which the containers are placed
	// (the zero Parent: berth's cgroupfs default).
	CgroupParent cgroup.Parent
	// Files prepared by the sandbox, bind-mounted into every container.
	// Empty paths are skipped.
	HostnamePath   string
	HostsPath      string
	ResolvConfPath string
	ShmPath        string
	// Runtime is what the pod's runtime handler changes in its
	// containers' specs.
	Runtime Runtime
}

// Runtime is a runtime handler's settings as containers' specs follow
// them (the config's [runtimes.NAME]).
type Runtime struct {
	Handler string // as RunPodSandbox got it, "" the default
	// PrivilegedWithoutHostDevices: a privileged container gets the
	// devices of an unprivileged one.
	PrivilegedWithoutHostDevices bool
	// NoRecursiveReadOnly refuses mounts asking for recursive_read_only.
	NoRecursiveReadOnly bool
	// Annotations go on every container's spec, under its config's own.
	Annotations map[string]string
}

// Propagation is the propagation type of the mount holding a host path.
type Propagation int

// Mount propagation of a host mount.
const (
	PropagationPrivate Propagation = iota
	PropagationSlave
	PropagationShared
)

// Host answers the questions the spec needs about this machine.
type Host interface {
	// AppArmor resolves AppArmor profiles; it is never nil.
	AppArmor() AppArmor
	// OwnOOMScoreAdj is berth's own oom_score_adj: a child cannot go lower
	// without CAP_SYS_RESOURCE.
	OwnOOMScoreAdj() int
	// Capabilities are those berth itself holds (its bounding set): a
	// privileged container gets all of them, and cannot get more.
	Capabilities() []string
	// CgroupV2 tells whether containers get a cgroup v2 (unified) hierarchy.
	CgroupV2() bool
	// Hugetlb tells whether containers can be given hugepage limits: the
	// hugetlb controller is mounted (v1) or enabled (v2). The kubelet sends
	// a limit for every page size the kernel knows, whether the controller
	// is there or not, and libcontainer fails a container whose limits it
	// cannot write.
	Hugetlb() bool
	// Devices describes the device node(s) at path (all nodes under it when
	// it is a directory).
	Devices(path string) ([]specs.LinuxDevice, error)
	// AllDevices lists every device node of the host, for privileged
	// containers.
	AllDevices() ([]specs.LinuxDevice, error)
	// MountSource makes sure a bind mount's source exists on the host,
	// making a missing one a directory (0755): the kubelet leaves that to
	// the runtime for hostPath volumes of no type (flannel's /run/flannel),
	// as containerd, CRI-O and Docker do.
	MountSource(path string) error
	// Propagation is the propagation of the mount that holds path.
	Propagation(path string) (Propagation, error)
	// ReadFile reads a host file (Localhost seccomp profiles).
	ReadFile(path string) ([]byte, error)
}

// RootFS reads files of the container's root filesystem, resolving
// symlinks inside it.
type RootFS interface {
	ReadFile(path string) ([]byte, error)
}

// Input is everything a container's spec is made of.
type Input struct {
	ID        string
	Config    *runtimeapi.ContainerConfig
	Pod       Pod
	Image     ImageConfig
	ImageName string
	// Rootfs is the prepared (mounted) root filesystem.
	Rootfs string
	// TargetPID is the init pid of the container whose PID namespace is
	// joined when the PID namespace mode is TARGET.
	TargetPID int
	// ImageVolumes are the prepared image mounts: config mount index →
	// host path to bind (the image's read-only mount, at its sub path).
	ImageVolumes map[int]string
	// Sandbox makes the spec of the pod's infra (pause) container: it
	// creates the pod's IPC, UTS and PID namespaces (each unless the pod
	// shares the host's) instead of joining pause's, in the pinned network
	// namespace, and it is placed in the pod's own cgroup (its ID is the
	// pod's).
	Sandbox bool
	Host    Host
	Files   RootFS
	// CDI gives the CDI devices the config asks for; nil is CDI turned
	// off (enable_cdi = false).
	CDI CDI
}

// InvalidError is a request that cannot be turned into a spec: the field
// names the offending CRI field.
type InvalidError struct {
	Field string
	Err   error
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

func invalid(field string, format string, args ...any) error {
	return &InvalidError{Field: field, Err: fmt.Errorf(format, args...)}
}

// IsInvalid tells whether err is the request's fault.
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}

// Build returns the OCI runtime spec of the container.
func Build(in *Input) (*specs.Spec, error) {
	if in.Config == nil {
		return nil, invalid("config", "missing")
	}
	if in.Host == nil || in.Files == nil {
		return nil, errors.New("spec: Host and Files are required")
	}
	if in.Rootfs == "" || !path.IsAbs(in.Rootfs) {
		return nil, fmt.Errorf("spec: rootfs %q is not absolute", in.Rootfs)
	}
	b := &builder{in: in, sc: securityContext(in.Config), psc: podSecurityContext(in.Pod.Config)}
	s := &specs.Spec{
		Version:     specs.Version,
		Root:        &specs.Root{Path: in.Rootfs, Readonly: b.sc.GetReadonlyRootfs()},
		Process:     &specs.Process{Terminal: in.Config.Tty},
		Annotations: b.annotations(),
		Linux: &specs.Linux{
			Resources: &specs.LinuxResources{},
		},
	}
	steps := []func(*specs.Spec) error{
		b.checkAnnotations,
		b.process,
		b.user,
		b.namespaces,
		b.hostname,
		b.mounts,
		b.devices,
		b.security,
		b.seccomp,
		b.resources,
		b.sysctls,
		b.cdi,
	}
	for _, step := range steps {
		if err := step(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

type builder struct {
	in  *Input
	sc  *runtimeapi.LinuxContainerSecurityContext
	psc *runtimeapi.LinuxSandboxSecurityContext
}

func securityContext(c *runtimeapi.ContainerConfig) *runtimeapi.LinuxContainerSecurityContext {
	if sc := c.GetLinux().GetSecurityContext(); sc != nil {
		return sc
	}
	return &runtimeapi.LinuxContainerSecurityContext{}
}

func podSecurityContext(p *runtimeapi.PodSandboxConfig) *runtimeapi.LinuxSandboxSecurityContext {
	if sc := p.GetLinux().GetSecurityContext(); sc != nil {
		return sc
	}
	return &runtimeapi.LinuxSandboxSecurityContext{}
}

// Annotations berth puts on every container spec, as containerd does, so
// that tools reading the spec can tell which pod a container belongs to.
const (
	AnnotationContainerType = "io.kubernetes.cri.container-type"
	AnnotationContainerName = "io.kubernetes.cri.container-name"
	AnnotationSandboxID     = "io.kubernetes.cri.sandbox-id"
	AnnotationSandboxName   = "io.kubernetes.cri.sandbox-name"
	AnnotationSandboxNS     = "io.kubernetes.cri.sandbox-namespace"
	AnnotationSandboxUID    = "io.kubernetes.cri.sandbox-uid"
	AnnotationImageName     = "io.kubernetes.cri.image-name"
)

// libcontainerAnnotations are the spec annotations libcontainer acts on:
// org.systemd.property.NAME becomes a property of the container's
// systemd scope on the host (CRI-O's CVE-2024-3154 let a pod's
// annotations set them), org.criu.config names a host file CRIU reads.
// Only the node's owner may set them, in a runtime handler's
// default_annotations; a CRI caller's are refused.
var libcontainerAnnotations = []string{"org.systemd.property.", "org.criu.config"}

func (b *builder) checkAnnotations(*specs.Spec) error {
	for k := range b.in.Config.GetAnnotations() {
		for _, p := range libcontainerAnnotations {
			if strings.HasPrefix(k, p) {
				return invalid("annotations", "%q: annotations under %q are settings of the runtime on the host, not the container's; only a runtime handler's default_annotations may set them", k, p)
			}
		}
	}
	return nil
}

func (b *builder) annotations() map[string]string {
	a := make(map[string]string, len(b.in.Pod.Runtime.Annotations)+len(b.in.Config.Annotations)+7)
	for k, v := range b.in.Pod.Runtime.Annotations {
		a[k] = v
	}
	for k, v := range b.in.Config.Annotations {
		a[k] = v
	}
	md := b.in.Pod.Config.GetMetadata()
	a[AnnotationContainerType] = "container"
	if b.in.Sandbox {
		a[AnnotationContainerType] = "sandbox"
	}
	a[AnnotationContainerName] = b.in.Config.GetMetadata().GetName()
	a[AnnotationSandboxID] = b.in.Pod.ID
	a[AnnotationSandboxName] = md.GetName()
	a[AnnotationSandboxNS] = md.GetNamespace()
	a[AnnotationSandboxUID] = md.GetUid()
	if b.in.ImageName != "" {
		a[AnnotationImageName] = b.in.ImageName
	}
	return a
}

func (b *builder) hostname(s *specs.Spec) error {
	// The pod's hostname only belongs in a private UTS namespace: with the
	// host's, setting it would rename the node.
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.UTSNamespace {
			s.Hostname = b.in.Pod.Config.GetHostname()
		}
	}
	return nil
}

func (b *builder) sysctls(s *specs.Spec) error {
	sysctls := b.in.Pod.Config.GetLinux().GetSysctls()
	if len(sysctls) == 0 {
		return nil
	}
	has := map[specs.LinuxNamespaceType]bool{}
	for _, ns := range s.Linux.Namespaces {
		has[ns.Type] = true
	}
	s.Linux.Sysctl = map[string]string{}
	for k, v := range sysctls {
		// A sysctl of a namespace the container shares with the host was
		// already applied by the node's owner: setting it here would change
		// the node (and libcontainer refuses it).
		if need, ok := sysctlNamespace(k); ok && !has[need] {
			continue
		}
		s.Linux.Sysctl[k] = v
	}
	return nil
}

func sysctlNamespace(key string) (specs.LinuxNamespaceType, bool) {
	switch {
	case strings.HasPrefix(key, "net."):
		return specs.NetworkNamespace, true
	case key == "kernel.hostname" || key == "kernel.domainname":
		return specs.UTSNamespace, true
	case key == "kernel.msgmax" || key == "kernel.msgmnb" || key == "kernel.msgmni" ||
		key == "kernel.sem" || key == "kernel.shmall" || key == "kernel.shmmax" ||
		key == "kernel.shmmni" || key == "kernel.shm_rmid_forced" ||
		strings.HasPrefix(key, "fs.mqueue."):
		return specs.IPCNamespace, true
	}
	return "", false
}

func itoa(i int) string { return strconv.Itoa(i) }
