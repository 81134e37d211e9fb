// Package pause is berth's built-in pod infra process. It holds the pod's
// namespaces, applies the pod's hostname and namespaced sysctls from
// inside them, reaps orphans when it is PID 1 of the pod's PID namespace,
// and exits 0 on SIGTERM or SIGINT.
//
// Its command line is Spec.Args: -h HOSTNAME, -s PATH=VALUE per sysctl
// (PATH under /proc/sys, as SysctlPath maps it). It reports "ok", or the
// error, on fd SyncFD, then EOF.
//
// Before it reports, pause seals itself: a container sharing its PID
// namespace with CAP_SYS_PTRACE may open /proc/1/root, /proc/1/cwd and
// /proc/1/fd/N, and ptrace pause, so all of that must reach nothing the
// container does not have already. Pause gets a mount namespace of its
// own whose only mount is an empty, read-only tmpfs (its root and working
// dir), keeps no descriptor but stdio and the sync pipe, and drops every
// capability for good: no new privileges, uid and gid 65535 (as
// Kubernetes' pause image), not dumpable.
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
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

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

// sealEnv marks pause's second run: the first applied the spec, entered a
// mount namespace of its own and executed pause again there (see
// Main). Its value is the first run's mount namespace, which the second
// checks it has left.
const sealEnv = "BERTH_PAUSE_SEAL"

// id is the uid and gid pause runs as once sealed.
const id = 65535

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
	// Two runs of the same program. The Go runtime has threads before
	// main, and a thread's mount namespace, root and capabilities are its
	// own: unshared on one, the others would still show the host's root
	// at /proc/1/task/N/root. So the first run applies the spec, unshares
	// the mount namespace on its thread and executes pause again from
	// there; every thread of the second run is born in that namespace,
	// which it empties (seal).
	var err error
	if host, ok := os.LookupEnv(sealEnv); ok {
		err = seal(host)
	} else if err = setup(args, os.Getenv(SpecEnv)); err == nil {
		err = reexec()
	}
	if err != nil {
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

// reexec runs pause again in a mount namespace of its own: from this
// thread, whose namespace it becomes, with what the second run needs
// already set so that its threads inherit it. It returns only on error.
func reexec() error {
	runtime.LockOSThread() // never unlocked: the exec replaces the process
	host, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	// Descriptors berth's launcher leaked (a user-namespace launch passes
	// the program as an open file) would be the host's, readable through
	// /proc/1/fd: closed by the exec. The Go runtime's are close-on-exec.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range fds {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > SyncFD {
			syscall.CloseOnExec(fd)
		}
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	// Both survive the exec, and are inherited by every thread the second
	// run's runtime starts: root's capabilities are recomputed at exec
	// without gain, so the second run still has those it needs to mount.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := clearInheritable(); err != nil {
		return err
	}
	// The runtime keeps the host's cgroup CPU files open for its
	// GOMAXPROCS unless told not to: they would be the host's, open in
	// pause, and the pod's root reopens them for writing through
	// /proc/1/fd/N.
	godebug := "containermaxprocs=0"
	var env []string
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			godebug = v + "," + godebug
		} else {
			env = append(env, kv)
		}
	}
	env = append(env, "GODEBUG="+godebug, sealEnv+"="+host)
	err = syscall.Exec("/proc/self/exe", os.Args, env)
	return fmt.Errorf("exec pause again: %w", err)
}

func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear the inheritable capabilities: %w", err)
	}
	return nil
}

// seal is the second run's: it pivots into an empty, read-only root,
// leaving the host's whole tree, and drops every capability.
func seal(host string) error {
	if mnt, err := os.Readlink("/proc/self/ns/mnt"); err != nil || mnt == host || host == "" {
		return fmt.Errorf("not in a mount namespace of its own (%s, was %s): %v", mnt, host, err)
	}
	// The per-thread steps below, where they cannot reach every thread,
	// at least stay on this one, which runs Main.
	runtime.LockOSThread()
	// Private first: nothing done here may propagate to the host, nor
	// the host's mounts (other pods' rootfs) into this namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The new root, empty and read-only from the start, on /proc (a
	// directory certain to exist) and entered; pivot_root(".", ".")
	// stacks the old root on it with no directory for it, and the detach
	// drops the host's tree. The root and working dir are per process
	// here (the runtime's threads share them), and pivot_root moves them.
	// A chroot would not do: with the old root still mounted,
	// /proc/1/root/.. from a container would climb into the host's /.
	if err := unix.Mount("berth-pause", "/proc", "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0555,size=4k"); err != nil {
		return fmt.Errorf("mount tmpfs on /proc: %w", err)
	}
	if err := unix.Chdir("/proc"); err != nil {
		return fmt.Errorf("chdir /proc: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into an empty tmpfs: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	// The bounding set needs CAP_SETPCAP to shrink: first.
	for c := 0; c < 64; c++ {
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err == unix.EINVAL {
			break // past the kernel's last capability
		} else if err != nil {
			return fmt.Errorf("drop the bounding set: %w", err)
		}
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear the ambient set: %w", err)
	}
	// The ids, on every thread (the syscall package sees to it); leaving
	// 0 empties the permitted, effective and ambient sets. 65535 is not
	// mapped in a user namespace of fewer than 65536 ids (EINVAL): pause
	// then stays its root, with no capabilities.
	// EPERM: a user namespace whose setgroups is denied, where no
	// process can change its groups.
	if err := syscall.Setgroups(nil); err != nil && err != syscall.EPERM {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(id, id, id); err != nil && err != syscall.EINVAL {
		return fmt.Errorf("setresgid %d: %w", id, err)
	}
	if err := syscall.Setresuid(id, id, id); err != nil && err != syscall.EINVAL {
		return fmt.Errorf("setresuid %d: %w", id, err)
	}
	// On the heap, where they do not move while every thread reads them.
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	none := new([2]unix.CapUserData)
	err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&none[0])), 0)
	runtime.KeepAlive(hdr)
	runtime.KeepAlive(none)
	if err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	// The uid change made it so already, unless the host's suid_dumpable
	// says otherwise (dumpability is the process's, not a thread's): then
	// only CAP_SYS_PTRACE, not a container process running as 65535 too,
	// may open /proc/1/mem or ptrace pause.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set not dumpable: %w", err)
	}
	return nil
}

// allThreads makes a per-thread system call on every thread of the
// process. Where the runtime cannot (with cgo: `berth pause` in the berth
// binary) it is made on this locked thread only: the others then keep
// their bounding set, inert without permitted capabilities, with no new
// privileges (set before the exec) and never executing.
func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if errno == syscall.ENOTSUP {
		_, _, errno = syscall.RawSyscall(trap, a1, a2, a3)
	}
	if errno != 0 {
		return errno
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
