// Package framework runs real berth daemons for end-to-end tests: it
// builds the binary, starts daemons in private temp dirs, talks CRI to
// them through their sockets and cleans everything up.
//
// Environment:
//
//	BERTH_TEST_BINARY    berth binary to test instead of building ./cmd/...
//	                     (hack/test sets it to what hack/build just made; the
//	                     scripts' own BERTH_BINARY is not read, so a test run
//	                     after `source hack/env.sh` never tests a stale build)
//	BERTH_CNI_BIN_DIR    CNI plugin binaries (passed to every daemon if set)
//	BERTH_CRICTL         crictl binary
//	BERTH_TEST_REGISTRY  host:port of the local test registry
//
// The hack/ scripts set them; tests that need one call the matching helper,
// which skips the test with a clear message when it is unset.
package framework

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// Environment variables the tests rely on.
const (
	EnvBinary       = "BERTH_TEST_BINARY"
	EnvCNIBinDir    = "BERTH_CNI_BIN_DIR"
	EnvCrictl       = "BERTH_CRICTL"
	EnvTestRegistry = "BERTH_TEST_REGISTRY"
	// EnvPodProcess, when set, is the pod_process every test daemon runs
	// with (podproc, berth's default, or monitor): the suite against the
	// Go monitor that pods made before the C pod process keep.
	EnvPodProcess = "BERTH_TEST_POD_PROCESS"
)

// PodProcessBinary is the program of the pod processes the test daemons
// start for new pods: berth-podproc, or berth-monitor where EnvPodProcess
// asks for the Go monitor.
func PodProcessBinary() string {
	if os.Getenv(EnvPodProcess) == "monitor" {
		return "berth-monitor"
	}
	return "berth-podproc"
}

// CNIBinDir returns $BERTH_CNI_BIN_DIR or skips the test.
func CNIBinDir(t testing.TB) string { return requireEnv(t, EnvCNIBinDir, "CNI plugins") }

// Crictl returns $BERTH_CRICTL or skips the test.
func Crictl(t testing.TB) string { return requireEnv(t, EnvCrictl, "crictl") }

// CrictlOrCached is $BERTH_CRICTL, else the test bed's cached build
// (hack/install-tools, under the default $BERTH_CACHE), else it skips the
// test.
func CrictlOrCached(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvCrictl); p != "" {
		return p
	}
	if m, _ := filepath.Glob("/var/cache/berth-dev/cri-tools-*/crictl"); len(m) > 0 {
		return m[0]
	}
	return Crictl(t)
}

// TestRegistry returns $BERTH_TEST_REGISTRY or skips the test.
func TestRegistry(t testing.TB) string {
	return requireEnv(t, EnvTestRegistry, "the local test registry")
}

func requireEnv(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("needs %s: $%s is unset (hack/test sets it up)", what, name)
	}
	return v
}

// RequireRoot skips the test unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// FreeTCPAddr returns a loopback host:port that was free a moment ago.
func FreeTCPAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
