package spec

import (
	"fmt"
	"sort"
	"strings"

	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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

// DefaultAppArmorProfile is the profile used for RuntimeDefault, when the
// host has loaded it.
const DefaultAppArmorProfile = "berth-default"

func (b *builder) apparmor(s *specs.Spec) error {
	const field = "linux.security_context.apparmor"
	prof := b.sc.GetApparmor()
	// The field's reference names the profile; callers that knew the
	// annotation's form (critest among them) still send "localhost/NAME",
	// and containerd and CRI-O take both.
	typ, ref := prof.GetProfileType(), strings.TrimPrefix(prof.GetLocalhostRef(), "localhost/")
	if prof == nil {
		switch legacy := b.sc.GetApparmorProfile(); {
		case legacy == "" || legacy == "unconfined":
			typ = runtimeapi.SecurityProfile_Unconfined
		case legacy == "runtime/default":
			typ = runtimeapi.SecurityProfile_RuntimeDefault
		case strings.HasPrefix(legacy, "localhost/"):
			typ, ref = runtimeapi.SecurityProfile_Localhost, strings.TrimPrefix(legacy, "localhost/")
		default:
			return invalid("linux.security_context.apparmor_profile", "unknown profile %q", legacy)
		}
	}
	if b.sc.GetPrivileged() || typ == runtimeapi.SecurityProfile_Unconfined {
		return nil
	}
	enabled := b.in.Host.AppArmorEnabled()
	switch typ {
	case runtimeapi.SecurityProfile_RuntimeDefault:
		if enabled && b.in.Host.AppArmorProfileLoaded(DefaultAppArmorProfile) {
			s.Process.ApparmorProfile = DefaultAppArmorProfile
		}
	case runtimeapi.SecurityProfile_Localhost:
		if !enabled {
			return invalid(field, "AppArmor is not enabled on this host")
		}
		if ref == "" || !b.in.Host.AppArmorProfileLoaded(ref) {
			return invalid(field+".localhost_ref", "AppArmor profile %q is not loaded", ref)
		}
		s.Process.ApparmorProfile = ref
	default:
		return invalid(field+".profile_type", "unknown profile type %d", typ)
	}
	return nil
}
