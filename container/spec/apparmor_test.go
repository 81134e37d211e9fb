package spec

import (
	"context"
	"errors"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeAppArmor has every profile loaded but "gone"; loads counts
// EnsureDefault's calls.
type fakeAppArmor struct {
	usable bool
	loads  int
	fail   error
}

func (f *fakeAppArmor) Usable() error {
	if !f.usable {
		return errors.New("AppArmor is not enabled in this host's kernel")
	}
	return nil
}
func (f *fakeAppArmor) Loaded(name string) bool { return f.usable && name != "gone" }
func (f *fakeAppArmor) EnsureDefault(context.Context) (string, error) {
	f.loads++
	return DefaultAppArmorProfile, f.fail
}

func TestAppArmorResolution(t *testing.T) {
	const (
		field       = "linux.security_context.apparmor.localhost_ref"
		legacyField = "linux.security_context.apparmor_profile"
	)
	prof := func(typ runtimeapi.SecurityProfile_ProfileType, ref string) *runtimeapi.SecurityProfile {
		return &runtimeapi.SecurityProfile{ProfileType: typ, LocalhostRef: ref}
	}
	rd, lh, uc := runtimeapi.SecurityProfile_RuntimeDefault, runtimeapi.SecurityProfile_Localhost, runtimeapi.SecurityProfile_Unconfined
	for _, tc := range []struct {
		name       string
		noAppArmor bool
		field      *runtimeapi.SecurityProfile
		legacy     string
		privileged bool
		sandbox    bool
		want       string // the profile; "" none
		invalid    string // the field of an InvalidError
		loads      int    // EnsureDefault calls
	}{
		{name: "nothing asked", want: "berth-default", loads: 1},
		{name: "RuntimeDefault", field: prof(rd, ""), want: "berth-default", loads: 1},
		{name: "legacy runtime/default", legacy: "runtime/default", want: "berth-default", loads: 1},
		{name: "legacy docker/default", legacy: "docker/default", want: "berth-default", loads: 1},
		{name: "Localhost", field: prof(lh, "mine"), want: "mine"},
		{name: "Localhost annotation form", field: prof(lh, "localhost/mine"), want: "mine"},
		{name: "legacy localhost", legacy: "localhost/mine", want: "mine"},
		{name: "Localhost not loaded", field: prof(lh, "gone"), invalid: field},
		{name: "legacy localhost not loaded", legacy: "localhost/gone", invalid: legacyField},
		{name: "Localhost without name", field: prof(lh, ""), invalid: field},
		{name: "legacy localhost without name", legacy: "localhost/", invalid: legacyField},
		{name: "Unconfined", field: prof(uc, "")},
		{name: "legacy unconfined", legacy: "unconfined"},
		{name: "legacy unknown", legacy: "bogus", invalid: legacyField},
		{name: "unknown type", field: prof(99, ""), invalid: "linux.security_context.apparmor.profile_type"},
		{name: "field wins over legacy", field: prof(uc, ""), legacy: "localhost/mine"},
		{name: "field wins over bad legacy", field: prof(rd, ""), legacy: "bogus", want: "berth-default", loads: 1},
		{name: "privileged", privileged: true},
		{name: "privileged RuntimeDefault", privileged: true, field: prof(rd, "")},
		{name: "privileged Localhost", privileged: true, field: prof(lh, "mine"), want: "mine"},
		{name: "privileged legacy localhost", privileged: true, legacy: "localhost/mine", want: "mine"},
		{name: "infra container", sandbox: true},
		{name: "infra container Localhost", sandbox: true, field: prof(lh, "gone")},
		{name: "no AppArmor: nothing asked", noAppArmor: true},
		{name: "no AppArmor: RuntimeDefault", noAppArmor: true, field: prof(rd, "")},
		{name: "no AppArmor: Unconfined", noAppArmor: true, field: prof(uc, "")},
		{name: "no AppArmor: Localhost", noAppArmor: true, field: prof(lh, "mine"), invalid: field},
		{name: "no AppArmor: legacy localhost", noAppArmor: true, legacy: "localhost/mine", invalid: legacyField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			aa := &fakeAppArmor{usable: !tc.noAppArmor}
			in := baseInput()
			in.Host = fakeHost{aa: aa, files: map[string]string{}}
			in.Sandbox = tc.sandbox
			c := sc(in)
			c.Apparmor, c.ApparmorProfile, c.Privileged = tc.field, tc.legacy, tc.privileged
			if tc.privileged {
				in.Pod.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}}
			}
			s, err := Build(in)
			checkInvalid(t, err, tc.invalid)
			if err != nil {
				return
			}
			if s.Process.ApparmorProfile != tc.want {
				t.Errorf("profile %q, want %q", s.Process.ApparmorProfile, tc.want)
			}
			if aa.loads != tc.loads {
				t.Errorf("%d default loads, want %d", aa.loads, tc.loads)
			}
		})
	}
}

// A default profile that cannot be loaded fails the container rather
// than running it unconfined.
func TestAppArmorDefaultLoadFails(t *testing.T) {
	in := baseInput()
	in.Host = fakeHost{aa: &fakeAppArmor{usable: true, fail: errors.New("parser said no")}, files: map[string]string{}}
	if _, err := Build(in); err == nil || IsInvalid(err) {
		t.Fatalf("error %v, want a load failure", err)
	}
}

// SystemHost without an AppArmor system confines nothing and refuses a
// Localhost profile with the reason.
func TestSystemHostWithoutAppArmor(t *testing.T) {
	aa := SystemHost{}.AppArmor()
	if aa.Usable() == nil || aa.Loaded(DefaultAppArmorProfile) {
		t.Fatal("nil AppArmorSystem is usable")
	}
}
