package container_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestPodProcessOutOfReach: with the C pod process (pod_process =
// "podproc"), a container of a pod that shares its PID namespace, given
// CAP_SYS_PTRACE and CAP_KILL, cannot reach the pod's own process: it is
// not in the pod's PID namespace, so the container cannot name it to
// signal it, ptrace it or open its /proc files; and pause, the PID 1 the
// container sees, holds its stdio and nothing else.
func TestPodProcessOutOfReach(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("berth-podproc is built with gcc, which is not installed")
	}
	e := newEnv(t, framework.WithArgs("--pod-process", "podproc"))
	podCfg := e.podConfig("reach")
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}}
	pod := e.runPod(podCfg)
	_, pause := e.podStatus(pod)
	podproc := framework.MonitorOf(t, pod, pause)
	if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", podproc)); strings.TrimSpace(string(cmd)) != "berth-podproc" {
		t.Fatalf("pause's parent %d is %q, not the C pod process", podproc, cmd)
	}
	cfg := e.ctrConfig("prober", "exec sleep 100000")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	cfg.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"SYS_PTRACE", "KILL"}}
	id := e.run(pod, podCfg, cfg)

	// Every process the container sees: pause, itself, what it runs.
	out := e.exec(id, 10, "sh", "-c", `for d in /proc/[0-9]*; do echo "${d#/proc/} $(tr '\0' ' ' < $d/cmdline)"; done`)
	if strings.Contains(string(out.Stdout), "berth-podproc") || strings.Contains(string(out.Stdout), "berth-spawn") {
		t.Fatalf("the container sees the pod's own process:\n%s", out.Stdout)
	}
	if !strings.Contains(string(out.Stdout), "1 ") {
		t.Fatalf("the container does not see pause as its PID 1:\n%s", out.Stdout)
	}
	// pause's descriptors: its stdio only (no pipe, no socket of the pod
	// process's beyond them).
	out = e.exec(id, 10, "sh", "-c", "ls /proc/1/fd | tr '\\n' ' '")
	if strings.TrimSpace(string(out.Stdout)) != "0 1 2" {
		t.Fatalf("pause's descriptors seen from the container: %q (stderr %q)", out.Stdout, out.Stderr)
	}
	// The pod process's pid, as the host numbers it, names nothing the
	// container may signal or read.
	out = e.exec(id, 10, "sh", "-c", fmt.Sprintf("kill -9 %d; echo kill=$?; cat /proc/%d/environ >/dev/null 2>&1; echo read=$?", podproc, podproc))
	if !strings.Contains(string(out.Stdout), "read=1") {
		t.Fatalf("reading the pod process's /proc files from the container: %q %q", out.Stdout, out.Stderr)
	}
	if err := syscall.Kill(podproc, 0); err != nil {
		t.Fatalf("the pod process (%d) after the container's kill: %v", podproc, err)
	}
	if st, _ := e.podStatus(pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod after the container's attempts: %s", st)
	}
}
