package container_test

import (
	"fmt"
	"os"
	"path/filepath"
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
	// Built next to berth where gcc is, or installed there (a test bed's
	// BERTH_TEST_BINARY).
	if _, err := os.Stat(filepath.Join(filepath.Dir(framework.Binary(t)), "berth-podproc")); err != nil {
		t.Skip("no berth-podproc next to berth (it is built where gcc is)")
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
	// The probes reach what the container may reach: pause, PID 1 of the
	// shared namespace, whose descriptors, memory and signals are open to
	// a CAP_SYS_PTRACE and CAP_KILL container (the control).
	probe := func(pid int) string {
		return fmt.Sprintf("ls /proc/%[1]d/fd >/dev/null 2>&1; echo fd=$?; "+
			"cat /proc/%[1]d/maps >/dev/null 2>&1; echo maps=$?; "+
			"kill -0 %[1]d 2>/dev/null; echo sig=$?; cat /proc/%[1]d/environ >/dev/null 2>&1; echo read=$?", pid)
	}
	out = e.exec(id, 10, "sh", "-c", probe(1)+"; addr=$(head -n1 /proc/1/maps | cut -d- -f1); dd if=/proc/1/mem of=/dev/null bs=1 count=16 skip=$((0x$addr)) 2>/dev/null; echo mem=$?")
	for _, want := range []string{"fd=0", "maps=0", "sig=0", "read=0", "mem=0"} {
		if !strings.Contains(string(out.Stdout), want) {
			t.Fatalf("the control probe does not reach pause (want %s): %q %q", want, out.Stdout, out.Stderr)
		}
	}
	// The pod process's pid, as the host numbers it, names nothing the
	// container may open, read, trace or signal: its descriptors, its
	// memory, its environment, a signal (SIGKILL last).
	out = e.exec(id, 10, "sh", "-c", probe(podproc)+fmt.Sprintf("; dd if=/proc/%[1]d/mem of=/dev/null bs=1 count=16 2>/dev/null; echo mem=$?; kill -9 %[1]d 2>/dev/null; echo kill=$?", podproc))
	for _, reached := range []string{"fd=0", "maps=0", "sig=0", "read=0", "mem=0", "kill=0"} {
		if strings.Contains(string(out.Stdout), reached) {
			t.Fatalf("the container reached the pod process (%s): %q %q", reached, out.Stdout, out.Stderr)
		}
	}
	if err := syscall.Kill(podproc, 0); err != nil {
		t.Fatalf("the pod process (%d) after the container's kill: %v", podproc, err)
	}
	if st, _ := e.podStatus(pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod after the container's attempts: %s", st)
	}
}
