// Command berth-monitor is berth's per-pod monitor (see package
// monitor/monitord). One runs per pod for the pod's whole life, so it is
// a binary of its own and kept small: no libcontainer and no cgo (the
// short-lived berth-spawn, next to it, does what needs them), one P.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/monitord"
)

// syncFD is where berth waits for "ok" (or an error) once the socket is
// served.
const syncFD = 3

func main() {
	// Sampling heap profiles costs a monitor its bucket table and the
	// pages it touches, for a profile nobody reads.
	runtime.MemProfileRate = 0
	fs := flag.NewFlagSet("berth-monitor", flag.ContinueOnError)
	pod := fs.String("pod", "", "pod sandbox id")
	sock := fs.String("socket", "", "unix socket to serve")
	root := fs.String("root", "", "libcontainer state root")
	driver := fs.String("cgroup-driver", "cgroupfs", "cgroup driver: cgroupfs or systemd")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	sync := os.NewFile(syncFD, "sync")
	report := func(msg string) {
		if sync != nil {
			sync.WriteString(msg)
			sync.Close()
			sync = nil
		}
	}
	if *pod == "" || *sock == "" || *root == "" {
		report("berth-monitor: --pod, --socket and --root are required")
		os.Exit(2)
	}
	// The driver by name only: the cgroup library (and its D-Bus client)
	// is the helper's, linked there, not in a process every pod keeps.
	var systemd bool
	switch *driver {
	case "", "cgroupfs":
	case "systemd":
		systemd = true
	default:
		report(fmt.Sprintf("berth-monitor: unknown cgroup driver %q (cgroupfs or systemd)", *driver))
		os.Exit(2)
	}
	helperEnv := os.Environ()
	if systemd {
		// The helpers talk to systemd on its private socket (as systemctl
		// does as root), not through dbus-daemon, which lets one user hold
		// 256 connections: helpers of many pods at once would take them
		// from the kubelet. go-systemd falls back to the private socket
		// when the system bus cannot be dialled; an address with no
		// transport makes that immediate.
		helperEnv = append(helperEnv, "DBUS_SYSTEM_BUS_ADDRESS=none:")
	}
	helper, err := findHelper()
	if err != nil {
		report("berth-monitor: " + err.Error())
		os.Exit(2)
	}
	// The processes the helper starts become ours when it exits.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report("berth-monitor: become a child subreaper: " + err.Error())
		os.Exit(1)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("pod", *pod)
	// Berth's terminal, berth's death and a reader hanging up on a pipe
	// must not end the monitor: it outlives all of them on purpose.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	if err := os.MkdirAll(*root, 0o700); err != nil {
		report(err.Error())
		os.Exit(1)
	}
	os.Remove(*sock)
	l, err := net.Listen("unix", *sock)
	if err != nil {
		report(fmt.Sprintf("listen %s: %v", *sock, err))
		os.Exit(1)
	}
	srv, err := monitord.New(monitord.Options{Pod: *pod, Root: *root, Systemd: systemd, Helper: helper, HelperEnv: helperEnv, Log: log})
	if err != nil {
		report(err.Error())
		os.Exit(1)
	}
	report("ok")
	log.Info("monitor serving", "socket", *sock, "pid", os.Getpid(), "helper", helper)
	if err := srv.Serve(l); err != nil {
		log.Error("monitor failed", "error", err)
		os.Exit(1)
	}
	os.Remove(*sock)
	log.Info("monitor done")
}

// findHelper is the spawn helper next to this binary.
func findHelper() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(exe), monitor.SpawnBinary)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("find %s next to %s: %w", monitor.SpawnBinary, exe, err)
	}
	return p, nil
}
