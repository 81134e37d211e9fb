package spec

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/apparmor"
)

// DefaultCapabilities is containerd's default set, which Kubernetes users
// expect from any CRI runtime.
var DefaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// AllCapabilities lists every capability this build knows.
func AllCapabilities() []string {
	var out []string
	for _, c := range capability.ListKnown() {
		out = append(out, "CAP_"+strings.ToUpper(c.String()))
	}
	return out
}

// normalizeCap accepts "NET_ADMIN", "net_admin" and "CAP_NET_ADMIN".
func normalizeCap(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if c == "ALL" || strings.HasPrefix(c, "CAP_") {
		return c
	}
	return "CAP_" + c
}

// Capabilities applies the CRI add/drop lists to the default set: adds
// first, then drops, as containerd does. held are the capabilities berth
// itself holds (Host.Capabilities): "ALL" means every one of them, never
// one berth lacks (root here has no CAP_SYS_RESOURCE, and a container
// asking for it could not start); a default berth lacks is left out, and
// an explicit add of one it lacks is refused.
func Capabilities(c *runtimeapi.Capability, held []string) ([]string, error) {
	known := map[string]bool{}
	for _, k := range AllCapabilities() {
		known[k] = true
	}
	have := map[string]bool{}
	for _, k := range held {
		have[k] = true
	}
	set := map[string]bool{}
	for _, k := range DefaultCapabilities {
		if have[k] {
			set[k] = true
		}
	}
	for i, a := range c.GetAddCapabilities() {
		field := fmt.Sprintf("linux.security_context.capabilities.add_capabilities[%d]", i)
		a = normalizeCap(a)
		switch {
		case a == "ALL":
			for k := range have {
				set[k] = true
			}
		case !known[a]:
			return nil, invalid(field, "unknown capability %q", a)
		case !have[a]:
			return nil, invalid(field, "%s is not held by the runtime, so no container can have it", a)
		default:
			set[a] = true
		}
	}
	for i, d := range c.GetDropCapabilities() {
		d = normalizeCap(d)
		switch {
		case d == "ALL":
			set = map[string]bool{}
		case known[d]:
			delete(set, d)
		default:
			return nil, invalid(fmt.Sprintf("linux.security_context.capabilities.drop_capabilities[%d]", i), "unknown capability %q", d)
		}
	}
	// An explicit add survives a drop of ALL, as in containerd.
	if hasAll(c.GetDropCapabilities()) {
		for _, a := range c.GetAddCapabilities() {
			if a = normalizeCap(a); a != "ALL" {
				set[a] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

func hasAll(list []string) bool {
	for _, v := range list {
		if normalizeCap(v) == "ALL" {
			return true
		}
	}
	return false
}

func (b *builder) security(s *specs.Spec) error {
	if err := b.checkUserNamespace(); err != nil {
		return err
	}
	var caps []string
	if b.sc.GetPrivileged() {
		if !b.psc.GetPrivileged() {
			return invalid("linux.security_context.privileged", "a privileged container needs a privileged pod sandbox")
		}
		caps = b.in.Host.Capabilities()
	} else {
		var err error
		if caps, err = Capabilities(b.sc.GetCapabilities(), b.in.Host.Capabilities()); err != nil {
			return err
		}
	}
	var ambient []string
	for i, a := range b.sc.GetCapabilities().GetAddAmbientCapabilities() {
		a = normalizeCap(a)
		if !contains(caps, a) {
			return invalid(fmt.Sprintf("linux.security_context.capabilities.add_ambient_capabilities[%d]", i), "%s is not in the container's capability set", a)
		}
		ambient = append(ambient, a)
	}
	s.Process.Capabilities = &specs.LinuxCapabilities{
		Bounding:  caps,
		Effective: caps,
		Permitted: caps,
		Ambient:   ambient,
	}
	s.Process.NoNewPrivileges = b.sc.GetNoNewPrivs()
	return b.apparmor(s)
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// AppArmor is what the spec builder needs of the host's AppArmor
// (container/apparmor.System).
type AppArmor interface {
	// Usable returns nil when containers can be confined, else why not.
	Usable() error
	// EnsureDefault loads berth's default profile unless the kernel has
	// it, and returns its name.
	EnsureDefault(ctx context.Context) (string, error)
	// Loaded tells whether the kernel has a profile of that name.
	Loaded(name string) bool
}

// DefaultAppArmorProfile is the profile of RuntimeDefault and of
// containers that ask for none.
const DefaultAppArmorProfile = apparmor.DefaultProfile

// apparmorRequest is the profile a container asks for: the structured
// field, else the deprecated string, else nothing (the runtime's
// default, as in containerd and CRI-O). field names where it came from.
func (b *builder) apparmorRequest() (typ runtimeapi.SecurityProfile_ProfileType, ref, field string, err error) {
	if prof := b.sc.GetApparmor(); prof != nil {
		// Callers that knew the annotation's form (critest among them)
		// send "localhost/NAME" in the reference; containerd and CRI-O
		// take both.
		return prof.GetProfileType(), strings.TrimPrefix(prof.GetLocalhostRef(), "localhost/"), "linux.security_context.apparmor.localhost_ref", nil
	}
	const legacyField = "linux.security_context.apparmor_profile"
	switch legacy := b.sc.GetApparmorProfile(); {
	case legacy == "" || legacy == "runtime/default" || legacy == "docker/default":
		return runtimeapi.SecurityProfile_RuntimeDefault, "", legacyField, nil
	case legacy == "unconfined":
		return runtimeapi.SecurityProfile_Unconfined, "", legacyField, nil
	case strings.HasPrefix(legacy, "localhost/"):
		return runtimeapi.SecurityProfile_Localhost, strings.TrimPrefix(legacy, "localhost/"), legacyField, nil
	default:
		return 0, "", legacyField, invalid(legacyField, "unknown AppArmor profile %q", legacy)
	}
}

func (b *builder) apparmor(s *specs.Spec) error {
	// The infra container runs only pause.
	if b.in.Sandbox {
		return nil
	}
	typ, ref, field, err := b.apparmorRequest()
	if err != nil {
		return err
	}
	aa := b.in.Host.AppArmor()
	switch {
	case typ == runtimeapi.SecurityProfile_Localhost:
		if ref == "" {
			return invalid(field, "a Localhost AppArmor profile needs a profile name")
		}
		if err := aa.Usable(); err != nil {
			return invalid(field, "AppArmor profile %q cannot be applied: %v", ref, err)
		}
		if !aa.Loaded(ref) {
			return invalid(field, "AppArmor profile %q is not loaded", ref)
		}
		s.Process.ApparmorProfile = ref
		return nil
	case typ == runtimeapi.SecurityProfile_Unconfined:
		return nil
	case typ != runtimeapi.SecurityProfile_RuntimeDefault:
		return invalid("linux.security_context.apparmor.profile_type", "unknown profile type %d", typ)
	}
	// A privileged container is the host's, as in containerd; without
	// AppArmor the default is to run unconfined.
	if b.sc.GetPrivileged() || aa.Usable() != nil {
		return nil
	}
	// The builder has no context; the load bounds its own wait.
	name, err := aa.EnsureDefault(context.Background())
	if err != nil {
		return fmt.Errorf("AppArmor profile for RuntimeDefault: %w", err)
	}
	s.Process.ApparmorProfile = name
	return nil
}
