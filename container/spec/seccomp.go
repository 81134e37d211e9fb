package spec

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Profile is a seccomp profile in the format Docker, containerd and the
// kubelet's Localhost profiles use: the OCI fields plus per-architecture
// maps and rules that apply only with (or without) some capabilities.
type Profile struct {
	DefaultAction   specs.LinuxSeccompAction `json:"defaultAction"`
	DefaultErrnoRet *uint                    `json:"defaultErrnoRet,omitempty"`
	Architectures   []specs.Arch             `json:"architectures,omitempty"`
	ArchMap         []ArchMap                `json:"archMap,omitempty"`
	Flags           []specs.LinuxSeccompFlag `json:"flags,omitempty"`
	ListenerPath    string                   `json:"listenerPath,omitempty"`
	Syscalls        []Rule                   `json:"syscalls,omitempty"`
}

// ArchMap names the extra architectures a native one implies (x86 and x32
// on amd64).
type ArchMap struct {
	Arch specs.Arch   `json:"architecture"`
	Sub  []specs.Arch `json:"subArchitectures"`
}

// Rule is one syscall rule; it applies only when Includes matches and
// Excludes does not.
type Rule struct {
	Name     string                   `json:"name,omitempty"`
	Names    []string                 `json:"names,omitempty"`
	Action   specs.LinuxSeccompAction `json:"action"`
	ErrnoRet *uint                    `json:"errnoRet,omitempty"`
	Args     []specs.LinuxSeccompArg  `json:"args,omitempty"`
	Includes Filter                   `json:"includes,omitempty"`
	Excludes Filter                   `json:"excludes,omitempty"`
}

// Filter selects by capability (any listed one present) and architecture
// (Go names: amd64, arm64, ...).
type Filter struct {
	Caps   []string `json:"caps,omitempty"`
	Arches []string `json:"arches,omitempty"`
}

var nativeArch = map[string]specs.Arch{
	"amd64":   specs.ArchX86_64,
	"386":     specs.ArchX86,
	"arm64":   specs.ArchAARCH64,
	"arm":     specs.ArchARM,
	"ppc64le": specs.ArchPPC64LE,
	"s390x":   specs.ArchS390X,
	"riscv64": specs.ArchRISCV64,
}

// Compile resolves the profile for a process with caps on goarch.
func (p *Profile) Compile(caps []string, goarch string) (*specs.LinuxSeccomp, error) {
	if p.DefaultAction == "" {
		return nil, fmt.Errorf("seccomp profile has no defaultAction")
	}
	out := &specs.LinuxSeccomp{
		DefaultAction:   p.DefaultAction,
		DefaultErrnoRet: p.DefaultErrnoRet,
		Flags:           p.Flags,
		ListenerPath:    p.ListenerPath,
	}
	if len(p.ArchMap) > 0 && len(p.Architectures) > 0 {
		return nil, fmt.Errorf("seccomp profile has both architectures and archMap")
	}
	out.Architectures = append(out.Architectures, p.Architectures...)
	for _, m := range p.ArchMap {
		if m.Arch == nativeArch[goarch] {
			out.Architectures = append(append(out.Architectures, m.Arch), m.Sub...)
		}
	}
	have := map[string]bool{}
	for _, c := range caps {
		have[c] = true
	}
	for i, r := range p.Syscalls {
		if r.Action == "" {
			return nil, fmt.Errorf("seccomp rule %d has no action", i)
		}
		if !r.Includes.match(have, goarch, true) || r.Excludes.match(have, goarch, false) {
			continue
		}
		names := r.Names
		if r.Name != "" {
			names = append([]string{r.Name}, names...)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("seccomp rule %d names no syscall", i)
		}
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: names, Action: r.Action, ErrnoRet: r.ErrnoRet, Args: r.Args})
	}
	return out, nil
}

// match reports whether the filter selects; an empty filter gives empty.
func (f Filter) match(caps map[string]bool, goarch string, empty bool) bool {
	if len(f.Caps) == 0 && len(f.Arches) == 0 {
		return empty
	}
	if len(f.Arches) > 0 && !containsString(f.Arches, goarch) {
		return false
	}
	if len(f.Caps) > 0 {
		for _, c := range f.Caps {
			if caps[c] {
				return true
			}
		}
		return false
	}
	return true
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// ParseProfile reads a Localhost profile.
func ParseProfile(data []byte) (*Profile, error) {
	p := &Profile{}
	if err := json.Unmarshal(data, p); err != nil {
		return nil, err
	}
	return p, nil
}

func (b *builder) seccomp(s *specs.Spec) error {
	const field = "linux.security_context.seccomp"
	prof := b.sc.GetSeccomp()
	typ, ref := prof.GetProfileType(), prof.GetLocalhostRef()
	if prof == nil {
		// The legacy string field, and no profile at all meaning unconfined,
		// as the kubelet sends when the SeccompDefault option is off.
		switch legacy := b.sc.GetSeccompProfilePath(); {
		case legacy == "" || legacy == "unconfined":
			typ = runtimeapi.SecurityProfile_Unconfined
		case legacy == "runtime/default" || legacy == "docker/default":
			typ = runtimeapi.SecurityProfile_RuntimeDefault
		case strings.HasPrefix(legacy, "localhost/"):
			typ, ref = runtimeapi.SecurityProfile_Localhost, strings.TrimPrefix(legacy, "localhost/")
		default:
			return invalid("linux.security_context.seccomp_profile_path", "unknown profile %q", legacy)
		}
	}
	if b.sc.GetPrivileged() {
		return nil
	}
	var p *Profile
	switch typ {
	case runtimeapi.SecurityProfile_Unconfined:
		return nil
	case runtimeapi.SecurityProfile_RuntimeDefault:
		p = DefaultProfile()
	case runtimeapi.SecurityProfile_Localhost:
		if !strings.HasPrefix(ref, "/") {
			return invalid(field+".localhost_ref", "%q is not an absolute path", ref)
		}
		data, err := b.in.Host.ReadFile(ref)
		if err != nil {
			return invalid(field+".localhost_ref", "read profile: %w", err)
		}
		if p, err = ParseProfile(data); err != nil {
			return invalid(field+".localhost_ref", "parse profile %s: %w", ref, err)
		}
	default:
		return invalid(field+".profile_type", "unknown profile type %d", typ)
	}
	sc, err := p.Compile(s.Process.Capabilities.Bounding, runtime.GOARCH)
	if err != nil {
		return invalid(field, "%w", err)
	}
	s.Linux.Seccomp = sc
	return nil
}
