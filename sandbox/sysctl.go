package sandbox

import (
	"fmt"
	"strings"
)

// sysctlNamespace tells which namespace a sysctl belongs to, or "" for a
// sysctl that is not namespaced (and so would change the whole node).
func sysctlNamespace(name string) string {
	n := strings.ReplaceAll(name, "/", ".")
	switch {
	case strings.HasPrefix(n, "net."):
		return "net"
	case n == "kernel.sem", strings.HasPrefix(n, "kernel.shm"), strings.HasPrefix(n, "kernel.msg"), strings.HasPrefix(n, "fs.mqueue."):
		return "ipc"
	}
	return ""
}

// checkSysctls refuses sysctls pause could not apply inside the pod:
// not namespaced, or of a namespace the pod shares with the host.
func checkSysctls(sysctls map[string]string, hostNet, hostIPC bool) error {
	for name, value := range sysctls {
		if name == "" || strings.Contains(name, "..") || strings.ContainsAny(value, "\x00\n") {
			return fmt.Errorf("%w: sysctl %q=%q", ErrInvalid, name, value)
		}
		switch sysctlNamespace(name) {
		case "net":
			if hostNet {
				return fmt.Errorf("%w: sysctl %q needs the pod's own network namespace, the pod uses the host's", ErrInvalid, name)
			}
		case "ipc":
			if hostIPC {
				return fmt.Errorf("%w: sysctl %q needs the pod's own IPC namespace, the pod uses the host's", ErrInvalid, name)
			}
		default:
			return fmt.Errorf("%w: sysctl %q is not namespaced", ErrInvalid, name)
		}
	}
	return nil
}
