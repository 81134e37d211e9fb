package container_test

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSecurityContext(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("sec")
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
	pod := e.runPod(podCfg)

	t.Run("user and groups", func(t *testing.T) {
		cfg := e.ctrConfig("user", "id")
		sc := cfg.Linux.SecurityContext
		sc.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: 3000}
		sc.SupplementalGroups = []int64{4000}
		out, st := e.output(pod, podCfg, cfg)
		if !strings.Contains(out, "uid=1000") || !strings.Contains(out, "gid=3000") || !strings.Contains(out, "4000") {
			t.Fatalf("id: %q", out)
		}
		if u := st.GetUser().GetLinux(); u.GetUid() != 1000 || u.GetGid() != 3000 {
			t.Fatalf("status user %v", u)
		}
	})
	t.Run("username", func(t *testing.T) {
		cfg := e.ctrConfig("username", "id -un")
		cfg.Linux.SecurityContext.RunAsUsername = "nobody"
		if out, _ := e.output(pod, podCfg, cfg); out != "nobody" {
			t.Fatalf("id -un: %q", out)
		}
	})
	t.Run("readonly rootfs", func(t *testing.T) {
		cfg := e.ctrConfig("ro", "touch /x; echo rc=$?")
		cfg.Linux.SecurityContext.ReadonlyRootfs = true
		if out, _ := e.output(pod, podCfg, cfg); !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "rc=1") {
			t.Fatalf("touch: %q", out)
		}
	})
	t.Run("capabilities", func(t *testing.T) {
		cfg := e.ctrConfig("caps", "grep CapEff /proc/self/status")
		def, _ := e.output(pod, podCfg, cfg)
		cfg = e.ctrConfig("caps-add", "grep CapEff /proc/self/status")
		cfg.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"CHOWN"}}
		mod, _ := e.output(pod, podCfg, cfg)
		// containerd's default set is 0x a80425fb; NET_ADMIN is bit 12, CHOWN bit 0.
		if !strings.HasSuffix(def, "00000000a80425fb") || !strings.HasSuffix(mod, "00000000a80435fa") {
			t.Fatalf("CapEff default %q, +NET_ADMIN -CHOWN %q", def, mod)
		}
	})
	t.Run("privileged", func(t *testing.T) {
		cfg := e.ctrConfig("priv", "grep CapEff /proc/self/status; mount -o remount,rw /sys && echo sys-rw; ls /dev | grep -c .; test -w /proc/sys/kernel/domainname && echo proc-sys-rw")
		cfg.Linux.SecurityContext.Privileged = true
		out, _ := e.output(pod, podCfg, cfg)
		// Every capability berth holds (root here may lack some).
		if strings.Contains(out, "00000000a80425fb") {
			t.Fatalf("privileged caps are the default set: %q", out)
		}
		if !strings.Contains(out, "sys-rw") || !strings.Contains(out, "proc-sys-rw") {
			t.Fatalf("privileged: %q", out)
		}
	})
	t.Run("masked paths", func(t *testing.T) {
		// The shell's error goes nowhere: stdout and stderr are two pipes,
		// whose records reach the log in no set order.
		cfg := e.ctrConfig("masked", "wc -c < /proc/cpuinfo; { echo x > /proc/sys/kernel/domainname; } 2>/dev/null || echo ro-sys")
		cfg.Linux.SecurityContext.MaskedPaths = append(cfg.Linux.SecurityContext.MaskedPaths, "/proc/cpuinfo")
		out, _ := e.output(pod, podCfg, cfg)
		if !strings.HasPrefix(out, "0") || !strings.Contains(out, "ro-sys") {
			t.Fatalf("masked: %q", out)
		}
	})
	t.Run("seccomp default", func(t *testing.T) {
		script := "grep Seccomp: /proc/self/status; unshare -U true && echo unshared || echo blocked"
		cfg := e.ctrConfig("seccomp", script)
		cfg.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		out, _ := e.output(pod, podCfg, cfg)
		if !strings.Contains(out, "Seccomp:\t2") || !strings.Contains(out, "blocked") {
			t.Fatalf("RuntimeDefault: %q", out)
		}
		cfg = e.ctrConfig("unconfined", script)
		out, _ = e.output(pod, podCfg, cfg)
		if !strings.Contains(out, "Seccomp:\t0") || !strings.Contains(out, "unshared") {
			t.Fatalf("unconfined: %q", out)
		}
	})
}
