package container_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/apparmor"
	"github.com/berth-runtime/berth/test/framework"
)

const aaRemove = "/sys/kernel/security/apparmor/.remove"

// TestAppArmor checks the profile each kind of request gets, that the
// profiles confine, and that an unloaded profile is refused. It loads
// its own profiles and removes them, and berth-default too when it was
// not loaded before.
func TestAppArmor(t *testing.T) {
	framework.RequireRoot(t)
	sys := apparmor.New(t.TempDir(), apparmor.SystemPaths, nil)
	if err := sys.Usable(); err != nil {
		t.Skipf("AppArmor is not usable on this host: %v", err)
	}
	if !sys.Loaded(apparmor.DefaultProfile) {
		t.Cleanup(func() { removeProfile(t, apparmor.DefaultProfile) })
	}
	denyTmp := "berth-e2e-deny-tmp-" + framework.RandHex(4)
	loadProfile(t, denyTmp, "  file,\n  capability,\n  network,\n  signal,\n  ptrace,\n  unix,\n  umount,\n  deny /tmp/** w,\n")

	e := newEnv(t)
	podCfg := e.podConfig("apparmor")
	pod := e.runPod(podCfg)
	const script = "cat /proc/self/attr/current; echo; mkdir -p /m; mount -t tmpfs none /m 2>/dev/null && echo mounted || echo mount-denied; touch /tmp/x 2>/dev/null && echo wrote || echo write-denied"
	sleeper := func(name string, p *runtimeapi.SecurityProfile, legacy string) *runtimeapi.ContainerConfig {
		cfg := e.ctrConfig(name, script+"; sleep 300")
		sc := cfg.Linux.SecurityContext
		sc.Apparmor, sc.ApparmorProfile = p, legacy
		sc.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"SYS_ADMIN"}}
		return cfg
	}
	for _, tc := range []struct {
		name    string
		profile *runtimeapi.SecurityProfile
		legacy  string
		want    []string
	}{
		{name: "none asked", want: []string{"berth-default (enforce)", "mount-denied", "wrote"}},
		{name: "runtime-default", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			want: []string{"berth-default (enforce)", "mount-denied", "wrote"}},
		{name: "unconfined", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
			want: []string{"unconfined", "mounted", "wrote"}},
		{name: "localhost", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: denyTmp},
			want: []string{denyTmp + " (enforce)", "write-denied"}},
		{name: "legacy-localhost", legacy: "localhost/" + denyTmp, want: []string{denyTmp + " (enforce)", "write-denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := e.run(pod, podCfg, sleeper(tc.name, tc.profile, tc.legacy))
			// The exec's label is the init's: both are in want[0].
			out := e.exec(id, 10, "sh", "-c", "cat /proc/self/attr/current; echo; cat /proc/1/attr/current; echo")
			if got := strings.Fields(string(bytes.ReplaceAll(out.Stdout, []byte{0}, nil))); strings.Join(got, " ") != tc.want[0]+" "+tc.want[0] {
				t.Errorf("exec and init labels %q, want %q twice", got, tc.want[0])
			}
			text := waitLog(t, e.status(id).LogPath, tc.want[len(tc.want)-1])
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("log %q lacks %q", text, w)
				}
			}
		})
	}
	t.Run("removed default comes back", func(t *testing.T) {
		removeProfile(t, apparmor.DefaultProfile)
		out, _ := e.output(pod, podCfg, e.ctrConfig("reloaded", "cat /proc/self/attr/current"))
		if !strings.Contains(out, "berth-default (enforce)") {
			t.Fatalf("label %q", out)
		}
	})
	t.Run("not loaded", func(t *testing.T) {
		before := containerCount(t, e, pod)
		missing := "berth-e2e-missing-" + framework.RandHex(4)
		for _, cfg := range []*runtimeapi.ContainerConfig{
			sleeper("missing", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: missing}, ""),
			sleeper("missing-legacy", nil, "localhost/"+missing),
		} {
			_, err := e.d.Runtime.CreateContainer(framework.Ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "apparmor") {
				t.Errorf("CreateContainer with an unloaded profile: %v", err)
			}
		}
		if after := containerCount(t, e, pod); after != before {
			t.Errorf("%d containers after the refusals, %d before", after, before)
		}
	})
}

func containerCount(t *testing.T, e *env, pod string) int {
	t.Helper()
	resp, err := e.d.Runtime.ListContainers(framework.Ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod}})
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	return len(resp.Containers)
}

// loadProfile loads a profile of those rules for the test's length.
func loadProfile(t *testing.T, name, rules string) {
	t.Helper()
	cmd := exec.Command("apparmor_parser", "-Kr")
	cmd.Stdin = strings.NewReader("profile " + name + " flags=(attach_disconnected,mediate_deleted) {\n" + rules + "}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("apparmor_parser %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { removeProfile(t, name) })
}

// removeProfile unloads a profile by name, as aa-remove-unknown does.
func removeProfile(t *testing.T, name string) {
	if err := os.WriteFile(aaRemove, []byte(name), 0); err != nil && !strings.Contains(err.Error(), "no such file") {
		t.Errorf("remove AppArmor profile %s: %v", name, err)
	}
}
