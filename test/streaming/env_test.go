package streaming_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
)

type env struct {
	*framework.PodEnv
	crictl string
	cfg    string // an empty crictl config: no host file may leak in
}

func newEnv(t *testing.T) *env {
	t.Helper()
	framework.RequireRoot(t)
	crictl := framework.CrictlOrCached(t)
	e := &env{PodEnv: framework.NewPodEnv(t, "berth-stream-e2e"), crictl: crictl}
	e.cfg = filepath.Join(t.TempDir(), "crictl.yaml")
	os.WriteFile(e.cfg, nil, 0o644)
	return e
}

// crictlCmd is a crictl command against the daemon.
func (e *env) crictlCmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--config", e.cfg, "--runtime-endpoint", "unix://" + e.D.Socket, "--timeout", "20s"}, args...)
	return exec.CommandContext(ctx, e.crictl, full...)
}

// crictlRun runs crictl with stdin and returns its output and error.
func (e *env) crictlRun(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := e.crictlCmd(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var transports = []string{"spdy", "websocket"}
