package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// built is the binary built for this test process; building once per test
// binary is what makes a package of end-to-end tests affordable.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Binary returns the berth binary under test: $BERTH_TEST_BINARY, or
// ./cmd/berth built once for this test process.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("$%s: %v (run hack/build, or unset it to build from source)", EnvBinary, err)
		}
		return p
	}
	built.once.Do(func() { built.dir, built.path, built.err = build() })
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

func build() (dir, path string, err error) {
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	dir, err = os.MkdirTemp("", "berth-bin-")
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, "berth")
	// berth-monitor, berth-spawn and berth-pause are looked for next to berth; berth-spawn calls
	// libcontainer, whose seccomp support is behind the seccomp tag (and cgo).
	cmd := exec.Command("go", "build", "-tags", "seccomp", "-o", dir+"/", "./cmd/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("go build ./cmd/berth: %w\n%s", err, out)
	}
	// The C pod process (pod_process = "podproc", the default).
	cmd = exec.Command("make", "-s", "-C", "monitor/podproc/csrc", "OUT="+dir, filepath.Join(dir, "berth-podproc"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("make berth-podproc: %w\n%s", err, out)
	}
	// The monitor as hack/build makes it: without cgo.
	cmd = exec.Command("go", "build", "-o", dir+"/", "./cmd/berth-monitor")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("go build ./cmd/berth-monitor: %w\n%s", err, out)
	}
	return dir, path, nil
}

// moduleRoot walks up from the working directory to the go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Main runs the tests of a package and removes the binary built for them.
// Call it from TestMain:
//
//	func TestMain(m *testing.M) { framework.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// Result is the outcome of a berth command that ran to completion.
type Result struct {
	ExitCode       int
	Stdout, Stderr string
}

// RunBerth runs the berth binary with args and waits for it to exit; a
// command still running after 30s fails the test.
func RunBerth(t testing.TB, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("berth %q still running after 30s; stderr:\n%s", args, stderr.String())
	}
	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("run berth %q: %v", args, err)
	}
	return res
}
