// Package pause is berth's built-in pod infra process: `berth pause`. It
// holds the pod's namespaces, applies the pod's hostname and namespaced
// sysctls from inside them, reaps orphans when it is PID 1 of the pod's
// PID namespace, and exits 0 on SIGTERM or SIGINT.
package pause

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Subcommand is os.Args[1] that selects pause in the berth binary.
const Subcommand = "pause"

// Binary is the stand-alone pause binary (cmd/berth-pause), looked for
// next to berth.
const Binary = "berth-pause"

// SpecEnv carries the Spec to the pause process.
const SpecEnv = "BERTH_PAUSE_SPEC"

// SyncFD is the descriptor on which pause reports that it is set up:
// "ok", or the error, then EOF.
const SyncFD = 3

// Spec is what pause applies before it reports ready.
type Spec struct {
	Hostname string            `json:"hostname,omitempty"`
	Sysctls  map[string]string `json:"sysctls,omitempty"`
}

// Main runs pause and returns its exit code.
func Main() int {
	// Subscribed before reporting ready, so that a SIGTERM sent the moment
	// berth sees "ok" is never lost to the default action.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGCHLD)
	sync := os.NewFile(SyncFD, "sync")
	if err := setup(os.Getenv(SpecEnv)); err != nil {
		if sync != nil {
			fmt.Fprintf(sync, "%v", err)
		}
		return 1
	}
	if sync != nil {
		sync.WriteString("ok")
		sync.Close()
	}
	reaper := os.Getpid() == 1
	for sig := range sigs {
		switch sig {
		case unix.SIGCHLD:
			if reaper {
				reap()
			}
		default:
			return 0
		}
	}
	return 0
}

func setup(specJSON string) error {
	var spec Spec
	if specJSON != "" {
		if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
			return fmt.Errorf("pause spec: %w", err)
		}
	}
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("set hostname %q: %w", spec.Hostname, err)
		}
	}
	// Written from inside the pod's namespaces: /proc/sys/net and the IPC
	// sysctls resolve to the writer's namespaces.
	for name, value := range spec.Sysctls {
		if err := os.WriteFile(SysctlPath(name), []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", name, value, err)
		}
	}
	return nil
}

// SysctlPath maps a sysctl name to its /proc/sys file. Names use dots, or
// slashes when a component itself holds dots (net/ipv4/conf/eth0.100/...).
func SysctlPath(name string) string {
	if !strings.Contains(name, "/") {
		name = strings.ReplaceAll(name, ".", "/")
	}
	return filepath.Join("/proc/sys", filepath.Clean("/"+name))
}

func reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
