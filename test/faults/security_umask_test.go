package faults_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestSecurityUmaskZero: berth started under umask 0 (an init system or
// a shell may hand it one) makes nothing a host user could write: not
// its socket, not a pod monitor's socket, not a record, not a layer;
// nor anything they could read a container's secret environment from
// (records and specs hold it). Whatever berth and its monitors create
// must not take its mode from the umask alone.
func TestSecurityUmaskZero(t *testing.T) {
	framework.RequireRoot(t)
	// The daemon inherits the test process's umask; the test's own files
	// are made meanwhile, so it is given back as soon as berth runs.
	old := unix.Umask(0)
	e := framework.NewPodEnv(t, "berth-secumask")
	unix.Umask(old)

	if got := secUmask(t, e.D.PID); got != "0000" {
		t.Fatalf("berth runs with umask %s, not the 0 the test handed it: the test proves nothing", got)
	}
	pod, cfg := e.RunPod("umask")
	secret := "secret-" + framework.RandHex(8)
	ctr := e.Run(pod, cfg, "app", "echo hi > /tmp/x; sleep 100000", func(c *runtimeapi.ContainerConfig) {
		c.Envs = []*runtimeapi.KeyValue{{Key: "PASSWORD", Value: []byte(secret)}}
	})
	secExec{t: t, d: e.D, id: ctr}.ok("write the container's /tmp", "cat /tmp/x")
	for _, d := range []string{e.D.Dir} {
		if found := secOthersReach(d); len(found) > 0 {
			t.Errorf("under umask 0, host users can write under %s:\n%v", d, found)
		}
		if found := secOthersRead(d, secret); len(found) > 0 {
			t.Errorf("under umask 0, host users can read the container's secret in %v", found)
		}
	}
}

// secUmask is a process's umask as /proc/<pid>/status shows it.
func secUmask(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Umask in /proc/%d/status", pid)
	return ""
}
