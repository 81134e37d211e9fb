package security_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
)

// helperEnv names the helper a re-executed test binary runs (TestMain).
const helperEnv = "BERTH_SECURITY_HELPER"

// helperMain runs helper op with args and returns its exit code. Each
// prints one line per argument it could reach: "REACH <path> <what>".
func helperMain(op string, args []string) int {
	switch op {
	case "reach":
		// Each path: can it be looked up, read, or run?
		for _, p := range args {
			if _, err := os.Stat(p); err == nil {
				fmt.Printf("REACH %s stat\n", p)
			}
			if f, err := os.Open(p); err == nil {
				fmt.Printf("REACH %s open\n", p)
				f.Close()
			}
			if out, err := exec.Command(p).CombinedOutput(); err == nil || len(out) > 0 {
				fmt.Printf("REACH %s run: %q\n", p, bytes.TrimSpace(out))
			}
		}
	case "connect":
		for _, p := range args {
			c, err := net.DialTimeout("unix", p, 2*time.Second)
			if err == nil {
				fmt.Printf("REACH %s connect\n", p)
				c.Close()
			}
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", op)
		return 2
	}
	return 0
}

// asUser runs helper op as uid:gid (no supplementary groups) and returns
// the paths it reached, one "path what" per line.
func asUser(t *testing.T, uid, gid uint32, op string, args ...string) []string {
	t.Helper()
	// The test binary's own dir is root's only: a copy others can run.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(framework.TempDir(t), "helper")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+op)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %s as %d:%d: %v", op, uid, gid, err)
	}
	var reached []string
	for _, line := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(line, "REACH "); ok {
			reached = append(reached, r)
		}
	}
	return reached
}
