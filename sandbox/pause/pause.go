// Package pause is berth's built-in pod infra process. It holds the pod's
// namespaces, applies the pod's hostname and namespaced sysctls from
// inside them, reaps orphans when it is PID 1 of the pod's PID namespace,
// and exits 0 on SIGTERM or SIGINT.
//
// Its command line is Spec.Args: -h HOSTNAME, -s PATH=VALUE per sysctl
// (PATH under /proc/sys, as SysctlPath maps it). It reports "ok", or the
// error, on fd SyncFD, then EOF.
//
// The stand-alone binary, cmd/berth-pause, does all of it in C before the
// Go runtime starts (see pause.c there): a pod's pause then costs ~0.15 MB
// of memory and well under a millisecond to start. Main is the same
// program in Go: `berth pause`, used when berth-pause is not installed
// next to berth, and berth-pause itself when built without cgo.
package pause

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Subcommand is os.Args[1] that selects pause in the berth binary.
const Subcommand = "pause"

// Binary is the stand-alone pause binary (cmd/berth-pause), looked for
// next to berth.
const Binary = "berth-pause"

// SpecEnv carries a Spec as JSON: the older way to pass it, still read
// when set (then berth-pause leaves its work to Main). Args is the way.
const SpecEnv = "BERTH_PAUSE_SPEC"

// SyncFD is the descriptor on which pause reports that it is set up:
// "ok", or the error, then EOF.
const SyncFD = 3

// Spec is what pause applies before it reports ready.
type Spec struct {
	Hostname string            `json:"hostname,omitempty"`
	Sysctls  map[string]string `json:"sysctls,omitempty"`
}

// Args is the command line (after the program, or the subcommand) that
// makes pause apply s. Sysctls are given as their /proc/sys paths, in a
// fixed order.
func (s Spec) Args() []string {
	var args []string
	if s.Hostname != "" {
		args = append(args, "-h", s.Hostname)
	}
	names := make([]string, 0, len(s.Sysctls))
	for name := range s.Sysctls {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rel := strings.TrimPrefix(strings.TrimPrefix(SysctlPath(name), "/proc/sys"), "/")
		args = append(args, "-s", rel+"="+s.Sysctls[name])
	}
	return args
}

// ParseArgs reads what Args wrote. Sysctl names in the result are paths
// relative to /proc/sys (SysctlPath maps them to the same files).
func ParseArgs(args []string) (Spec, error) {
	var s Spec
	for i := 0; i < len(args); i++ {
		if i+1 >= len(args) {
			return s, fmt.Errorf("unknown argument %q", args[i])
		}
		switch args[i] {
		case "-h":
			s.Hostname = args[i+1]
		case "-s":
			path, value, ok := strings.Cut(args[i+1], "=")
			if !ok || path == "" || strings.HasPrefix(path, "/") {
				return s, fmt.Errorf("sysctl %q: want PATH=VALUE under /proc/sys", args[i+1])
			}
			if s.Sysctls == nil {
				s.Sysctls = map[string]string{}
			}
			s.Sysctls[path] = value
		default:
			return s, fmt.Errorf("unknown argument %q", args[i])
		}
		i++
	}
	return s, nil
}

// Main runs pause with its command-line arguments (those after the
// program or the subcommand) and returns its exit code.
func Main(args []string) int {
	// Subscribed before reporting ready, so that a SIGTERM sent the moment
	// berth sees "ok" is never lost to the default action.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGCHLD)
	sync := os.NewFile(SyncFD, "sync")
	if err := setup(args, os.Getenv(SpecEnv)); err != nil {
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

func setup(args []string, specJSON string) error {
	spec, err := ParseArgs(args)
	if err != nil {
		return err
	}
	if specJSON != "" {
		if len(args) > 0 {
			return errors.New("pause: both arguments and " + SpecEnv)
		}
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
