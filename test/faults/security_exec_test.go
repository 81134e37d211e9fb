package faults_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// secExec runs shell scripts in a running container through ExecSync.
type secExec struct {
	t  *testing.T
	d  *framework.Daemon
	id string
}

func (x secExec) run(script string) *runtimeapi.ExecSyncResponse {
	x.t.Helper()
	resp, err := x.d.Runtime.ExecSync(framework.Ctx(x.t), &runtimeapi.ExecSyncRequest{
		ContainerId: x.id, Cmd: []string{"sh", "-c", script}, Timeout: 25,
	})
	if err != nil {
		x.t.Fatalf("exec %q in %s: %v", script, x.id, err)
	}
	return resp
}

// ok runs script, which must succeed, and returns its stdout trimmed.
func (x secExec) ok(what, script string) string {
	x.t.Helper()
	r := x.run(script)
	if r.ExitCode != 0 {
		x.t.Fatalf("%s: %q exited %d: %s%s", what, script, r.ExitCode, r.Stdout, r.Stderr)
	}
	return strings.TrimSpace(string(r.Stdout))
}

// fails runs script, which must exit non-zero.
func (x secExec) fails(what, script string) {
	x.t.Helper()
	if r := x.run(script); r.ExitCode == 0 {
		x.t.Errorf("%s: %q succeeded in the container: %s", what, script, r.Stdout)
	}
}

// empty runs script, which must succeed and print nothing.
func (x secExec) empty(what, script string) {
	x.t.Helper()
	r := x.run(script)
	if r.ExitCode != 0 || len(strings.TrimSpace(string(r.Stdout))) != 0 {
		x.t.Errorf("%s: %q exited %d with %q (stderr %q), want nothing", what, script, r.ExitCode, r.Stdout, r.Stderr)
	}
}

// secCapBit reports whether bit n is set in a /proc/<pid>/status capability
// mask (hex).
func secCapBit(t *testing.T, hex string, n uint) bool {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
	if err != nil {
		t.Fatalf("capability mask %q: %v", hex, err)
	}
	return v&(1<<n) != 0
}

// secWaitFile waits until the file at path holds want: a container's first
// output reaches its log a moment after StartContainer returns.
func secWaitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not hold %q after a minute: %q", path, want, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
